// KvEventModel: decoded KV-event batches of a live vLLM / SGLang stream folded into kvscope's
// block model, per data-parallel rank and medium: which blocks each engine holds right now, the
// prefix tree their parent hashes make, counters, and a recording that becomes a Timeline (so
// `kvscope attach` writes recording.kvr and trace.json like any other run).
//
// The events are the file importer's (engine/trace/kv_events_import.h), one step per batch:
//   BlockStored      -> per block kBlockAllocated (block = slot, logical = depth in its chain,
//                       a = parent slot or -1, b = block_size, request = -1), then kBlockCached
//                       (a = 1, b = parent slot + 1) so replay shows it as a cached prefix block
//                       with its parent, as the prefix tree view expects
//   BlockRemoved     -> kCachedBlockEvicted (block = slot, a = -1) per live block removed
//   AllBlocksCleared -> kCachedBlockEvicted for every live block of that rank, ascending slots
// Slots are recycled (a removed block's slot goes to the next stored block), unlike the
// importer's one id per hash ever seen: a live stream has no end, its set of live blocks does.
//
// MEMORY is bounded whatever the run length:
//   - the live block map holds what the engines hold (a block leaves on BlockRemoved,
//     AllBlocksCleared or a restart), capped at KvModelLimits::max_live_blocks (~64 bytes each);
//     a store past the cap is counted in untracked_blocks and not kept;
//   - the recording keeps the first max_recorded_events events (40 bytes each) and
//     max_recorded_batches steps (24 bytes each); past either it stops growing
//     (recording_truncated()) while every counter goes on;
//   - counters are per rank and per medium (at most max_media names; more count as "OTHER");
//   - the removal history (what a lookup explains a miss with) keeps the last max_history
//     blocks that left (~64 bytes each).
//
// Views: a medium is the event's medium ("GPU" when nil), with " (remote)" appended for vLLM's
// locality REMOTE (blocks held elsewhere, reported by this publisher), so remote blocks are
// never counted with local ones. Groups are vLLM's KV cache groups (hybrid models: full
// attention, sliding window, Mamba), each with its own blocks and block size.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/kv/events.h"
#include "engine/trace/kv_event_stream.h"
#include "engine/trace/timeline.h"

namespace kvscope {

struct KvModelLimits {
  std::size_t max_live_blocks = 2'000'000;       // ~128 MB of live map at the cap
  std::size_t max_recorded_events = 4'000'000;   // ~160 MB of recording
  std::size_t max_recorded_batches = 1'000'000;  // ~24 MB
  std::size_t max_media = 16;
  std::size_t max_loras = 64;         // LoRA namespaces counted apart; more count as "OTHER"
  std::size_t max_history = 500'000;  // removed blocks remembered for lookups (FIFO)
  std::size_t max_groups = 64;        // KV cache groups described apart; more are not described
};

// What AllBlocksCleared drops. vLLM's comes from the GPU block pool only (its CPU offload tier
// keeps its blocks, or empties without an event when reset with reset_external=true); SGLang's
// drops every tier. kAuto decides per clear from what the stream has shown so far (vLLM's
// fields or media: GPU only; SGLang's, or nothing to tell: everything).
enum class KvClearScope : std::uint8_t { kAuto, kGpu, kAll };
// "auto", "gpu", "all".
const char* kv_clear_scope_name(KvClearScope s);
// The scope a name says; throws kvscope::Error naming `flag` for anything else.
KvClearScope parse_kv_clear_scope(const std::string& name, const std::string& flag);
// Which engine the stream looks like, from fields and media only one of them sends.
enum class KvEngineGuess : std::uint8_t { kUnknown, kVllm, kSglang };
const char* kv_engine_guess_name(KvEngineGuess g);  // "unknown", "vllm", "sglang"

// One KV cache group as its BlockStored events describe it.
struct KvGroupInfo {
  std::string spec_kind;  // kv_cache_spec_kind ("" when never given)
  std::optional<std::int64_t> sliding_window;
  std::int64_t block_size = 0;  // of its last store with tokens (0: placeholders only)
  std::int64_t live = 0;
  std::int64_t stored = 0;
};

// A prefix the engine holds that at least two cached continuations share: a block with two or
// more live children (requests that agreed on every token up to it, then diverged).
struct KvSharedPrefix {
  int rank = 0;
  std::string medium;
  std::string lora;           // "base" without a LoRA adapter
  std::int32_t blocks = 0;    // the prefix's length in blocks (its depth + 1)
  std::int64_t tokens = 0;    // blocks x its block size
  std::int32_t branches = 0;  // live children: continuations that share it
  // The chain reaches a first block (parent nil) through blocks kvscope holds. false: an
  // ancestor was stored before attach, in a lost batch, past the slot cap or is gone, so the
  // prefix is at least `blocks` long.
  bool complete = true;
  std::int32_t slot = -1;  // its slot in the recording (the block map, the prefix tree)
};

// Live and stored blocks of one LoRA namespace.
struct KvLoraCount {
  std::int64_t live = 0;
  std::int64_t stored = 0;
};

// A block removed this soon after it was stored (by the engine's batch timestamps) is churn.
inline constexpr double kKvShortLivedSeconds = 1.0;

struct KvModelCounters {
  std::int64_t batches = 0;  // batches applied, decoded or not
  std::int64_t undecodable = 0;
  std::array<std::int64_t, kNumKvEventKinds> events{};  // by KvEventKind
  std::int64_t blocks_stored = 0;     // block hashes carried by BlockStored events
  std::int64_t blocks_removed = 0;    // live blocks a BlockRemoved removed
  std::int64_t blocks_cleared = 0;    // live blocks dropped by AllBlocksCleared or a restart
  std::int64_t restored = 0;          // BlockStored of a block already live (kept, relinked)
  std::int64_t unknown_parents = 0;   // a parent hash not live on that rank, medium and group
  std::int64_t unknown_removals = 0;  // BlockRemoved of a hash not live (stored before attach?)
  std::int64_t untracked_blocks = 0;  // stores refused because the live map was full
  std::int64_t short_lived = 0;       // removed within kKvShortLivedSeconds of being stored
  std::int64_t skipped_events = 0;    // unknown event tags
  std::int64_t skipped_fields = 0;    // unknown map keys / positional fields
  std::int64_t placeholders = 0;      // blocks stored without token ids (offload placeholders)
  std::int64_t clears_gpu_only = 0;   // AllBlocksCleared applied to the GPU medium only
  std::int64_t clears_all = 0;        // AllBlocksCleared applied to every medium
  std::int64_t live = 0;              // blocks held now
  std::int64_t peak_live = 0;
};

// ---- "why did my prefix miss?" -----------------------------------------------------------------

// Where a lookup's match stops in one (rank, medium, group), and why.
enum class KvMissReason : std::uint8_t {
  kAllHeld,            // every full block of the prompt is held
  kShorterThanBlock,   // the prompt does not fill one block: engines cache full blocks only
  kNeverStored,        // the next block was never stored since kvscope attached
  kRemoved,            // the next block was stored, then removed (see removed_*)
  kOtherNamespace,     // the next block's tokens are held under another LoRA / extra keys
  kChainBeforeAttach,  // the next block is held, but its chain starts in a batch kvscope lacks
  kNoTokens,           // the medium's stores carry no token ids and no chain hash is known
};
const char* kv_miss_reason_name(KvMissReason r);  // "all_held", "never_stored", ...

struct KvLookupRow {
  int rank = 0;
  std::string medium;
  std::int64_t group = 0;
  std::int64_t block_size = 0;     // of this medium's blocks (0: placeholders)
  std::int64_t prompt_blocks = 0;  // full blocks in the prompt at that size
  std::int64_t matched_blocks = 0;
  std::int64_t matched_tokens = 0;
  std::int64_t prompt_tokens = 0;
  bool by_hash = false;  // placeholder blocks: matched by the chain's hashes, not by tokens
  KvMissReason reason = KvMissReason::kNeverStored;
  // kRemoved: the batch that removed it (the publisher's sequence number, -1 if unknown), its
  // timestamp, and how ("BlockRemoved", "AllBlocksCleared", "restart").
  std::int64_t removed_seq = -1;
  double removed_ts = 0.0;
  std::string removed_by;
  std::string other_namespace;      // kOtherNamespace: the LoRA name, or "extra keys"
  std::vector<std::int32_t> slots;  // the matched blocks' slots (block map, prefix tree)
};

struct KvLookupQuery {
  std::vector<std::int64_t> tokens;  // the prompt's token ids, as the engine tokenizes it
  std::string lora = "base";         // the LoRA adapter the request runs with
};

// One sentence for a row: "3 of 5 blocks held (48 of 80 tokens); block 4 was removed in batch
// 17 (BlockRemoved, 2.1 s before the last batch)".
std::string kv_lookup_text(const KvLookupRow& row, double last_ts);

class KvEventModel {
 public:
  explicit KvEventModel(KvModelLimits limits = {});

  // One decoded batch of `rank` (0..65535), the publisher's sequence number `seq` (-1 when not
  // known): one step of the recording.
  void apply(int rank, const KvEventBatch& batch, std::int64_t seq = -1);
  // A batch that arrived but did not decode: counted, and an empty step (steps stay batches).
  void apply_undecodable(int rank);
  // What AllBlocksCleared drops from now on (default kAuto).
  void set_clear_scope(KvClearScope s) { clear_scope_ = s; }
  KvClearScope clear_scope() const { return clear_scope_; }
  KvEngineGuess engine_guess() const { return engine_; }
  // The rank's publisher restarted (its sequence went back): its blocks are gone with it. The
  // evictions are recorded in the step of the next batch.
  void restart(int rank);

  const KvModelCounters& totals() const { return totals_; }
  const std::map<int, KvModelCounters>& by_rank() const { return by_rank_; }
  // Live blocks per medium name ("GPU" for nil / absent), over all ranks or for one rank.
  std::map<std::string, std::int64_t> live_by_medium() const;
  std::map<std::string, std::int64_t> live_by_medium(int rank) const;
  // The block size of the first BlockStored seen (0 before any).
  std::int64_t block_size() const { return block_size_; }
  // Live blocks per (rank, medium name), every pair that holds or held a block.
  std::map<std::pair<int, std::string>, std::int64_t> live_by_rank_medium() const;
  // Live blocks per (rank, medium name, group), every triple that holds or held a block.
  std::map<std::tuple<int, std::string, std::int64_t>, std::int64_t> live_by_rank_medium_group()
      const;
  // The KV cache groups seen, by group index.
  const std::map<std::int64_t, KvGroupInfo>& groups() const { return groups_; }
  // Live blocks per ownership, vLLM's offloading tier identifier (absent: not listed; at most
  // max_media names, more count as "OTHER").
  std::map<std::string, std::int64_t> live_by_ownership() const;
  // The timestamp of the last batch applied (0 before any).
  double last_ts() const { return last_ts_; }
  // Per LoRA namespace: the adapter's name, "lora#<id>" when only its id came, "base" for none.
  std::map<std::string, KvLoraCount> by_lora() const;
  // The `n` deepest prefixes shared by two or more live continuations, deepest first (ties: more
  // branches first, then slot). O(live blocks).
  std::vector<KvSharedPrefix> deepest_shared_prefixes(std::size_t n) const;
  // "Why did my prefix miss?": per (rank, medium, group) that holds or held blocks, how many
  // leading blocks of the prompt are held now and why the match stops (kv_lookup.cpp).
  // O(live blocks + history).
  std::vector<KvLookupRow> lookup(const KvLookupQuery& q) const;

  bool recording_truncated() const { return truncated_; }
  std::size_t recorded_batches() const { return steps_.size(); }
  std::size_t recorded_events() const { return events_.size(); }
  // The recording as a Timeline (one step per recorded batch; num_blocks = the slots used).
  Timeline build_timeline(const std::string& title) const;
  // Appends recorded steps [from, recorded_batches()) to `t` (a live view: a pool of at least
  // max_live_blocks slots, so every slot fits), with the same mapping as build_timeline. Returns
  // recorded_batches(), the `from` of the next call. The caller owns `t`'s writer side.
  std::size_t append_steps(Timeline& t, std::size_t from) const;

 private:
  struct Key {
    std::uint64_t hash;
    std::uint64_t scope;  // rank << 40 | medium << 32 | group
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const {
      return static_cast<std::size_t>(k.hash ^ (k.scope * 0x9E3779B97F4A7C15ull));
    }
  };
  struct Live {
    std::int32_t slot;
    std::int32_t depth;
    double stored_ts;
    std::uint64_t parent_hash = 0;  // valid when has_parent_hash
    std::uint64_t tokens = 0;       // kv_token_fingerprint of its tokens; 0 = a placeholder
    std::uint64_t extra = 0;        // its extra keys / cache salt fingerprint; 0 = none
    bool has_parent_hash = false;
    std::uint16_t ownership = 0;    // ownership name id; 0 = none
    std::int32_t parent = -1;       // the parent's slot, -1 for a first block
    std::uint32_t parent_gen = 0;   // that slot's generation then (a reused slot is not it)
    std::uint16_t lora = 0;         // LoRA namespace id
    bool rooted = false;            // its chain reaches a first block through live blocks
    std::int32_t block_tokens = 0;  // the block size its BlockStored gave
  };
  // A block that left, for lookups: what it was and which batch took it.
  struct Gone {
    std::uint64_t scope, hash, parent_hash, tokens, extra;
    std::int64_t seq;
    double ts;
    std::int32_t block_tokens;
    std::uint16_t lora;
    bool has_parent_hash;
    std::uint8_t how;  // 0 BlockRemoved, 1 AllBlocksCleared, 2 restart
  };
  struct Step {
    std::uint64_t end;  // one past its last recorded event
    std::int64_t live;  // live blocks after it
    double ts;
  };

  class Lookup;  // one lookup()'s index of the stream's blocks (kv_lookup.cpp)

  int medium_id(const std::string& name);
  std::uint16_t lora_id(const KvStreamEvent& ev);
  static std::uint64_t scope(int rank, int medium, std::int64_t group) {
    return static_cast<std::uint64_t>(rank) << 40 | static_cast<std::uint64_t>(medium) << 32 |
           static_cast<std::uint64_t>(group & 0xffffffff);
  }
  template <typename F>
  void count(int rank, F&& f) {
    f(totals_);
    f(by_rank_[rank]);
  }
  int medium_of(const KvStreamEvent& ev);  // the medium's id with " (remote)" for REMOTE
  std::uint16_t name_id(std::vector<std::string>& names, const std::string& name);
  void guess_engine(const KvStreamEvent& ev);
  // Where a BlockStored event's chain stands: what its next block hangs under.
  struct ChainLink {
    std::optional<std::uint64_t> parent_hash;
    std::int32_t parent_slot = -1;  // -1: no live parent
    std::int32_t depth = 0;
    bool rooted = false;
  };
  KvGroupInfo* group_info(const KvStreamEvent& ev);
  ChainLink chain_start(int rank, const KvStreamEvent& ev, std::uint64_t sc);
  void place_new(Live& l, int rank, int medium, std::int64_t group_idx, std::uint16_t lora,
                 KvGroupInfo* group);
  void stored(int rank, const KvStreamEvent& ev, double ts);
  void removed(int rank, const KvStreamEvent& ev, double ts);
  void drop_rank(int rank, bool gpu_only, std::uint8_t how);
  void erase(std::unordered_map<Key, Live, KeyHash>::iterator it, int rank, std::uint8_t how);
  void record(const Event& e);
  void begin_step();
  void end_step(double ts);

  KvModelLimits limits_;
  KvModelCounters totals_;
  std::map<int, KvModelCounters> by_rank_;
  std::vector<std::string> media_;                                       // medium id -> name
  std::map<std::tuple<int, int, std::int64_t>, std::int64_t> live_rmg_;  // (rank, medium, group)
  std::map<std::int64_t, KvGroupInfo> groups_;
  std::vector<std::string> owners_;  // ownership id -> name; 0 = ""
  std::map<std::uint16_t, std::int64_t> live_by_owner_;
  std::deque<Gone> history_;
  KvClearScope clear_scope_ = KvClearScope::kAuto;
  KvEngineGuess engine_ = KvEngineGuess::kUnknown;
  std::int64_t seq_ = -1;  // the batch being applied
  double last_ts_ = 0.0;
  std::unordered_map<Key, Live, KeyHash> live_;
  std::vector<std::int32_t> free_slots_;
  std::vector<std::uint32_t> slot_gen_;   // [slot] +1 every time the slot is given out
  std::vector<std::string> loras_;        // LoRA namespace id -> name; 0 = "base"
  std::vector<KvLoraCount> lora_counts_;  // by LoRA namespace id
  std::int32_t next_slot_ = 0;
  std::int64_t block_size_ = 0;
  // The recording.
  std::vector<Event> events_;
  std::vector<Step> steps_;
  bool truncated_ = false;  // a cap was reached: nothing more is recorded
};

}  // namespace kvscope

// PrefixCache: the prefix-sharing manager the Simulator calls. It owns a PrefixIndex, keeps the
// ref counts of shared blocks in the BlockPool, keeps freed blocks that hold a cached prefix
// reusable until their slot is needed (LRU / LFU / FIFO, pinned prefixes never), records why each
// lookup missed, does the copy-on-write bookkeeping for forks, and emits the prefix events.
//
// Reference model: pool.ref_count(b) = sequences holding b + (1 if b is cached). A cached block
// nobody holds therefore is not in the pool's free queue; allocate() evicts one when the free
// queue is empty. Every block of a prefix-cached run must come from allocate() or a lookup.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/kv/block_pool.h"
#include "engine/kv/block_source.h"
#include "engine/kv/event_payloads.h"
#include "engine/kv/events.h"
#include "engine/prefix/eviction_policy.h"
#include "engine/prefix/miss_reason.h"
#include "engine/prefix/prefix_index.h"

namespace kvscope {

struct PrefixCacheConfig {
  int block_size = 16;
  IndexKind index = IndexKind::kHashChain;
  EvictionPolicyKind policy = EvictionPolicyKind::kLru;
  bool enabled = true;
  BlockHashFn hash = nullptr;  // hash chain only; nullptr = strong_block_hash
};

struct PrefixLookupResult {
  std::vector<BlockId> blocks;  // map as logical blocks 0..n-1; each already holds a ref
  std::int64_t hit_tokens = 0;  // blocks.size() * block_size: prefill can skip these
  MissReason reason = MissReason::kNone;
  std::int64_t diverged_at = -1;      // first token not matched by any cached prefix (kDiverged)
  std::int32_t evicted_at_step = -1;  // kEvicted: the step the first missing block was evicted
};

// What lookup_and_acquire would find now, without taking anything (admission control).
struct PrefixProbe {
  int hit_blocks = 0;      // cached whole blocks it would map
  int evictable_hits = 0;  // of them, counted in num_allocatable() now (held by no sequence)
};

struct PrefixCacheMetrics {
  std::int64_t lookups = 0;
  std::int64_t prompt_tokens = 0;  // tokens of every looked-up prompt
  std::int64_t prompt_blocks = 0;  // their full blocks
  std::int64_t hit_tokens = 0;     // = prefill tokens saved
  std::int64_t hit_blocks = 0;
  std::int64_t inserted_blocks = 0;      // blocks that entered the cache
  std::int64_t deduplicated_blocks = 0;  // computed twice; the table switched to the cached copy
  std::int64_t evictions = 0;
  std::int64_t collisions = 0;    // hash-chain key hits rejected by the token comparison
  std::int64_t blocks_saved = 0;  // now: extra sequence references on shared blocks
  std::int64_t peak_blocks_saved = 0;
  std::array<std::int64_t, kNumMissReasons> lookups_by_reason{};
  double token_hit_rate() const {
    return prompt_tokens ? static_cast<double>(hit_tokens) / prompt_tokens : 0.0;
  }
  double block_hit_rate() const {
    return prompt_blocks ? static_cast<double>(hit_blocks) / prompt_blocks : 0.0;
  }
};

class PrefixCache : public BlockSource {
 public:
  PrefixCache(BlockPool& pool, const PrefixCacheConfig& config, EventSink* sink = nullptr);

  const PrefixCacheConfig& config() const { return config_; }
  const PrefixIndex& index() const { return *index_; }
  // The step stamped on events and eviction history.
  void set_step(std::int32_t step) { step_ = step; }
  // Called with every cached block the cache evicts, and its chain key, while the block still
  // holds its bytes (the KV tiers write it back then).
  using EvictObserver = std::function<void(BlockId, std::uint64_t chain_key)>;
  void set_evict_observer(EvictObserver observer) { evict_observer_ = std::move(observer); }

  // Finds the longest cached whole-block prefix of `prompt` (never the whole prompt: the last
  // token is always computed), takes a reference on each of its blocks, records the miss reason.
  // `record` false: a reservation (a decode instance keeping a request's cached prefix in place
  // until it is delivered, Scheduler::reserve_prefix), neither counted in the metrics nor
  // recorded as a lookup; its admission's lookup is.
  [[nodiscard]] PrefixLookupResult lookup_and_acquire(std::int32_t request,
                                                      std::span<const TokenId> prompt,
                                                      bool record = true);
  // Read-only: the blocks a lookup of `prompt` would hit now (no refs, metrics or events).
  PrefixProbe probe(std::span<const TokenId> prompt) const;
  // A fresh block for `request` (ref 1), evicting a cached block when the pool has no free one.
  [[nodiscard]] std::optional<BlockId> allocate() override;
  // Blocks allocate() can still deliver: free ones plus cached ones nobody holds (not pinned).
  int num_allocatable() const override { return pool_.num_free() + num_evictable_; }
  // Caches the full blocks of a sequence: table[i] holds tokens[i*bs, (i+1)*bs). Where the same
  // prefix is already cached in another block, table[i] is switched to that block (the duplicate
  // is released) so a sequence always holds an unbroken cached chain.
  void insert(std::int32_t request, std::span<const TokenId> tokens, std::span<BlockId> table);
  // Drops the sequence's reference on each block; cached blocks stay reusable.
  void release(std::span<const BlockId> table) override;
  // Parallel sampling: `child` shares every block of the parent's table (one more reference each).
  void fork(std::int32_t child, std::span<const BlockId> table) override;
  // Call before `request` writes into table[logical]: copies on write if the block is shared.
  [[nodiscard]] WriteAccess prepare_write(std::int32_t request, std::span<BlockId> table,
                                          int logical) override;

  // Pins the cached blocks of `prefix`'s longest cached prefix (system prompts): never evicted.
  int pin(std::span<const TokenId> prefix);
  int unpin(std::span<const TokenId> prefix);

  int num_cached() const { return static_cast<int>(index_->num_blocks()); }
  int num_evictable() const { return num_evictable_; }
  int sequence_refs(BlockId b) const { return meta_[idx(b)].seq_refs; }
  bool is_cached(BlockId b) const override { return meta_[idx(b)].cached; }
  bool is_pinned(BlockId b) const { return meta_[idx(b)].pinned; }
  const PrefixCacheMetrics& metrics() const { return metrics_; }

  // Checks the pool, the index and the links between them; throws kvscope::Error on the first
  // inconsistency (ref counts, candidates, reachability, child counts).
  void check_invariants() const;

 private:
  struct BlockMeta {
    std::int32_t seq_refs = 0;         // sequences holding the block
    std::int32_t cached_children = 0;  // cached blocks whose index parent is this one
    std::int32_t cached_by = -1;       // request that inserted it
    bool cached = false;
    bool pinned = false;
    std::uint64_t chain_key = 0;  // strong hash of the prefix through this block
    EvictionKey key;
  };
  static std::size_t idx(BlockId b) { return static_cast<std::size_t>(b.value); }
  bool is_candidate(const BlockMeta& m) const {
    return m.cached && m.seq_refs == 0 && !m.pinned && m.cached_children == 0;
  }
  // Call around any change of a block's candidate status or key.
  void unlist(BlockId b);
  void relist(BlockId b);
  void add_seq_ref(std::int32_t request, BlockId b, int logical, bool emit_shared);
  void drop_seq_ref(BlockId b);
  void evict(BlockId b);
  int set_pinned(std::span<const TokenId> prefix, bool pinned);
  template <class Payload>
  void emit(const Payload& p) {
    if (sink_) sink_->emit(to_event(p, step_));
  }

  BlockPool& pool_;
  PrefixCacheConfig config_;
  EventSink* sink_;
  std::unique_ptr<PrefixIndex> index_;
  std::vector<BlockMeta> meta_;  // [num_blocks]
  EvictionCandidates candidates_;
  std::unordered_map<std::uint64_t, std::int32_t> evicted_at_;  // chain key -> eviction step
  int num_evictable_ = 0;  // cached, unpinned, held by no sequence
  std::int64_t clock_ = 0;
  std::int32_t step_ = 0;
  EvictObserver evict_observer_;
  PrefixCacheMetrics metrics_;
};

}  // namespace kvscope

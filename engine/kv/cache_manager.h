// KvCacheManager: per-sequence block tables over one BlockPool, with two allocators:
//   paged      - blocks allocated on demand, one at a time, anywhere in the pool (PagedAttention);
//   contiguous - one run of consecutive blocks reserved for max_seq_len at admission (first fit),
//                the pre-paging baseline with its reservation waste and external fragmentation.
// Hands the forward pass a KvSeqView per sequence. Emits block events into an EventSink.
// With a BlockSource (the prefix cache; paged only) blocks come from and go back to the source, a
// block may be in several tables, and sequences can start on a prefix of existing blocks.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/kv/block_pool.h"
#include "engine/kv/block_source.h"
#include "engine/kv/event_payloads.h"
#include "engine/kv/kv_storage.h"
#include "engine/kv/kv_view.h"
#include "engine/kv/layer_groups.h"

namespace kvscope {

enum class AllocatorKind { kPaged, kContiguous };

// The rule "prefix caching needs the paged allocator": the prefix cache shares blocks between
// sequences, and the contiguous allocator reserves a private region per sequence that nothing
// else may hold. Every place that combines the two checks it here, so there is one message;
// `where` says what carried the values (a JSON path, a CLI flag; the engine's own callers name
// themselves). Throws kvscope::Error when prefix caching is on with another allocator.
void require_paged_for_prefix_caching(bool prefix_caching, AllocatorKind allocator,
                                      const std::string& where);

struct BlockTable {
  std::vector<BlockId> blocks;  // logical block -> physical block
  int num_tokens = 0;           // slots filled
  int reserved_blocks = 0;      // contiguous only: blocks reserved up front
};

class KvCacheManager {
 public:
  // `with_storage` false: bookkeeping only (trace replay at production scale, no K/V bytes).
  KvCacheManager(const KvLayout& layout, AllocatorKind kind, int max_seq_len, bool with_storage);

  const KvLayout& layout() const { return layout_; }
  AllocatorKind kind() const { return kind_; }
  int max_seq_len() const { return max_seq_len_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  KvStorage* storage() { return storage_.get(); }
  const KvStorage* storage() const { return storage_.get(); }
  void set_event_sink(EventSink* sink, const int* step) {
    sink_ = sink;
    step_ = step;
  }

  // Routes allocation and release through `source` (paged only; throws kvscope::Error for the
  // contiguous allocator). Call before adding sequences. nullptr: back to the pool.
  void set_block_source(BlockSource* source);
  BlockSource* block_source() const { return source_; }
  // Blocks appends can still take (free ones, plus cached ones the source can evict).
  int num_allocatable() const { return source_ ? source_->num_allocatable() : pool_.num_free(); }

  // Blocks a sequence of `tokens` tokens needs.
  int blocks_for(int tokens) const {
    return (tokens + layout_.block_size - 1) / layout_.block_size;
  }
  // Blocks the allocator must take to admit a new sequence whose first chunk is `tokens` long
  // (every layer group's).
  int blocks_to_admit(int tokens) const;
  // Blocks a sequence of `tokens` tokens holds at its end, every layer group's (blocks_for when
  // there is one group).
  int blocks_to_hold(int tokens) const;

  // Hybrid layer groups (engine/kv/layer_groups.h): the layout's block spans one group's layers,
  // the tables above are the first group's (full attention), and each later group holds blocks of
  // its own per sequence from the same pool: full attention one per block_size tokens, a sliding
  // window only those holding one of the last window - 1 tokens computed (the older go back to
  // the pool before the next append), a state group one per sequence. Paged, no block source, no
  // K/V storage (bookkeeping); call before adding sequences. Throws kvscope::Error otherwise.
  void set_layer_groups(const std::vector<KvGroup>& groups);
  int num_groups() const { return 1 + static_cast<int>(extra_.size()); }
  const KvGroup& group(int g) const {
    return g == 0 ? first_group_ : extra_.at(static_cast<std::size_t>(g - 1)).spec;
  }
  // Blocks group g holds now, over all sequences.
  long group_blocks(int g) const;
  // Group g's (>= 1) table of `id`: -1 where a sliding window's block went back to the pool.
  std::vector<int> group_table(int g, SeqId id) const;

  bool has_sequence(SeqId id) const { return tables_.count(id) != 0; }
  // Registers a sequence; the contiguous allocator reserves its whole region now. False (and no
  // change) when the pool cannot hold it.
  [[nodiscard]] bool add_sequence(SeqId id);
  // Registers a sequence that starts on `blocks` (each already holding a reference for it, e.g.
  // from a prefix-cache hit) filled with `tokens` tokens. Paged only.
  void add_sequence_with_prefix(SeqId id, std::vector<BlockId> blocks, int tokens);
  // Parallel sampling: `child` starts as a copy of `parent`'s table, sharing every block (needs
  // a BlockSource).
  void fork_sequence(SeqId parent, SeqId child);
  // Before `id` writes token slot `slot`: copy-on-write of a shared block (the K/V bytes of the
  // filled slots are copied). False when a copy was needed but no block was free.
  [[nodiscard]] bool prepare_write(SeqId id, int slot);
  // The source switched table[logical] of `id` to `block` (its references already moved): records
  // the drop of the old block.
  void replace_block(SeqId id, int logical, BlockId block);
  // Extra blocks needed to append `n` tokens to `id`.
  int blocks_needed(SeqId id, int n) const;
  // Makes room for `n` more tokens (allocating blocks as needed). False, with nothing changed,
  // when there are not enough free blocks.
  [[nodiscard]] bool append_slots(SeqId id, int n);
  // The same two calls for callers that sized the pool for their own sequences (evaluation,
  // generation, analysis, tests): there running out of blocks is a bug in that sizing, so they
  // throw InternalError instead of returning false.
  void require_add_sequence(SeqId id);
  void require_append_slots(SeqId id, int n);
  // Releases every block of the sequence and forgets it.
  void free_sequence(SeqId id);

  // Token eviction (paged, no block source; see engine/evict/token_evictor.h). Slot indices are
  // view indices: removing a block shifts every later slot down by block_size.
  // Releases table[logical] to the pool and removes it from the table (BlockFreed).
  void remove_block(SeqId id, int logical);
  // Copies the K/V bytes of slot `from` over slot `to` in every layer (SlotMoved).
  void move_slot(SeqId id, int from, int to);
  // Keeps the first `num_tokens` slots, releasing blocks no longer needed (BlockFreed).
  void truncate(SeqId id, int num_tokens);
  // Records that `evicted` tokens of `id` were just evicted, `live` remaining (TokensEvicted).
  void record_tokens_evicted(SeqId id, int evicted, int live) {
    emit(ev::TokensEvicted{id.value, evicted, live});
  }
  // Throws kvscope::Error (naming `where`) unless slots of `id` can be removed and moved.
  void check_evictable(SeqId id, const std::string& where) const;

  const BlockTable& table(SeqId id) const;
  // The forward pass's view of the sequence; num_slots = tokens appended so far.
  KvSeqView view(SeqId id);
  std::vector<SeqId> sequences() const;

  // Slots allocated to sequences (blocks x block_size, or the reservation when contiguous).
  long allocated_slots() const;
  long filled_slots() const;

  // Throws kvscope::Error on the first inconsistency: pool ref counts that are not the number of
  // tables holding the block (+1 when the source caches it), blocks owned by two sequences
  // (without a source), owned blocks
  // marked free, tables too short for their token counts, counts that do not add up.
  void check_invariants() const;

 private:
  // True when the last block is partially filled and also held by another sequence.
  bool shared_tail(const BlockTable& t) const;
  // The table entries group `g` holds for a sequence of `tokens` tokens: one for a state (once it
  // has a token), else one per block_size tokens (a window's released ones included).
  int group_entries(const KvGroup& g, int tokens) const;
  // The first group's blocks to append `n` tokens to `t`.
  int own_blocks_needed(const BlockTable& t, int n) const;
  // The later groups' blocks to append `n` tokens to a sequence at `t`, and (*frees) the sliding
  // windows' blocks that go back to the pool first.
  int extra_blocks_needed(SeqId id, const BlockTable& t, int n, int* frees) const;
  struct ExtraGroup {
    KvGroup spec;
    std::unordered_map<SeqId, std::vector<BlockId>> tables;  // BlockId(-1): released
  };
  template <class Payload>
  void emit(const Payload& p) {
    if (sink_ != nullptr) sink_->emit(to_event(p, step_ != nullptr ? *step_ : 0));
  }
  KvLayout layout_;
  AllocatorKind kind_;
  int max_seq_len_;
  BlockPool pool_;
  std::unique_ptr<KvStorage> storage_;
  std::unordered_map<SeqId, BlockTable> tables_;
  std::vector<SeqId> order_;  // sequences in the order they were added (deterministic iteration)
  EventSink* sink_ = nullptr;
  const int* step_ = nullptr;
  BlockSource* source_ = nullptr;
  KvGroup first_group_;
  std::vector<ExtraGroup> extra_;
};

}  // namespace kvscope

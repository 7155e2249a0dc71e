// KvCacheManager: per-sequence block tables over one BlockPool, with two allocators:
//   paged      - blocks allocated on demand, one at a time, anywhere in the pool (PagedAttention);
//   contiguous - one run of consecutive blocks reserved for max_seq_len at admission (first fit),
//                the pre-paging baseline with its reservation waste and external fragmentation.
// Hands the forward pass a KvSeqView per sequence. Emits block events into an EventSink.
#pragma once

#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/kv/block_pool.h"
#include "engine/kv/kv_storage.h"
#include "engine/kv/kv_view.h"
#include "engine/trace/events.h"

namespace kvscope {

enum class AllocatorKind { kPaged, kContiguous };

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
  void set_event_sink(EventSink* sink, const int* step) {
    sink_ = sink;
    step_ = step;
  }

  // Blocks a sequence of `tokens` tokens needs.
  int blocks_for(int tokens) const { return (tokens + layout_.block_size - 1) / layout_.block_size; }
  // Blocks the allocator must take to admit a new sequence whose first chunk is `tokens` long.
  int blocks_to_admit(int tokens) const;

  bool has_sequence(SeqId id) const { return tables_.count(id) != 0; }
  // Registers a sequence; the contiguous allocator reserves its whole region now. False (and no
  // change) when the pool cannot hold it.
  bool add_sequence(SeqId id);
  // Extra blocks needed to append `n` tokens to `id`.
  int blocks_needed(SeqId id, int n) const;
  // Makes room for `n` more tokens (allocating blocks as needed). False, with nothing changed,
  // when there are not enough free blocks.
  bool append_slots(SeqId id, int n);
  // Releases every block of the sequence and forgets it.
  void free_sequence(SeqId id);

  const BlockTable& table(SeqId id) const;
  // The forward pass's view of the sequence; num_slots = tokens appended so far.
  KvSeqView view(SeqId id);
  std::vector<SeqId> sequences() const;

  // Slots allocated to sequences (blocks x block_size, or the reservation when contiguous).
  long allocated_slots() const;
  long filled_slots() const;

  // Throws kvscope::Error on the first inconsistency: blocks owned by two sequences, owned blocks
  // marked free, tables too short for their token counts, counts that do not add up.
  void check_invariants() const;

 private:
  void emit(EventType type, SeqId seq, BlockId block, int logical, std::int64_t a = 0,
            std::int64_t b = 0);
  KvLayout layout_;
  AllocatorKind kind_;
  int max_seq_len_;
  BlockPool pool_;
  std::unique_ptr<KvStorage> storage_;
  std::unordered_map<SeqId, BlockTable> tables_;
  std::vector<SeqId> order_;  // sequences in the order they were added (deterministic iteration)
  EventSink* sink_ = nullptr;
  const int* step_ = nullptr;
};

}  // namespace kvscope

// BlockPool: the bookkeeping of a fixed set of physical blocks (ids, ref counts, the free queue).
// It never touches K/V bytes: KvStorage holds those, indexed by the same ids.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/kv/ids.h"

namespace kvscope {

class BlockPool {
 public:
  explicit BlockPool(int num_blocks);

  int num_blocks() const { return static_cast<int>(ref_count_.size()); }
  int num_free() const { return num_free_; }
  int num_used() const { return num_blocks() - num_free_; }

  // Takes the block at the front of the free queue (FIFO: the least recently freed). O(1).
  [[nodiscard]] std::optional<BlockId> allocate();
  // Takes `n` consecutive free blocks, the lowest-addressed run that fits (first fit). O(blocks).
  [[nodiscard]] std::optional<BlockId> allocate_run(int n);
  // Takes a specific free block out of the free queue (a prefix-cache hit on a freed block). O(1).
  void take(BlockId id);
  // Drops one reference; at zero the block joins the back of the free queue. O(1).
  void release(BlockId id);
  void add_ref(BlockId id);

  int ref_count(BlockId id) const { return ref_count_[static_cast<std::size_t>(id.value)]; }
  bool is_free(BlockId id) const { return ref_count(id) == 0; }
  // The next block allocate() would return, without taking it.
  std::optional<BlockId> peek_free() const;
  // Longest run of consecutive free blocks (external fragmentation). O(blocks).
  int largest_free_run() const;
  // Free blocks in queue order (front first).
  std::vector<BlockId> free_queue() const;

  // Throws InternalError describing the first inconsistency found. take/release/add_ref on an id
  // outside the pool, or in the wrong state (taking a used block, releasing a free one), throw
  // InternalError too: they are bookkeeping bugs.
  void check_invariants() const;

 private:
  // Throws InternalError for an id outside the pool (a bookkeeping bug, never user input).
  void check_id(BlockId id, const char* op) const;
  void unlink(std::int32_t i);
  void push_back(std::int32_t i);
  std::vector<std::int32_t> ref_count_;  // [num_blocks]
  // Intrusive doubly linked free queue; index num_blocks is the sentinel.
  std::vector<std::int32_t> prev_;  // [num_blocks + 1]
  std::vector<std::int32_t> next_;  // [num_blocks + 1]
  int num_free_ = 0;
};

}  // namespace kvscope

// BlockSource: where a paged KvCacheManager takes blocks from and returns them to when a layer
// above keeps blocks alive beyond their sequences (the prefix cache). Without one the manager uses
// the BlockPool directly.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "engine/kv/ids.h"

namespace kvscope {

// Copy-on-write bookkeeping for a write into logical block `logical`.
struct WriteAccess {
  bool needs_copy = false;     // the block was shared: `dst` replaced `src` in the table
  bool out_of_blocks = false;  // it was shared but no block could be allocated: table unchanged
  BlockId src;                 // copy src's slots [0, filled) into dst (KvStorage::copy_block)
  BlockId dst;
};

class BlockSource {
 public:
  virtual ~BlockSource() = default;
  // A fresh block held by one sequence (pool ref 1), or none when nothing can be freed.
  [[nodiscard]] virtual std::optional<BlockId> allocate() = 0;
  // Blocks allocate() can still deliver.
  virtual int num_allocatable() const = 0;
  // Drops the sequence's reference on each block.
  virtual void release(std::span<const BlockId> table) = 0;
  // Sequence `child` takes one more reference on each block of `table` (its parent's).
  virtual void fork(std::int32_t child, std::span<const BlockId> table) = 0;
  // Before `request` writes into table[logical]: swaps in a private copy when the block is shared.
  [[nodiscard]] virtual WriteAccess prepare_write(std::int32_t request, std::span<BlockId> table,
                                                  int logical) = 0;
  // True when the pool holds one reference on `b` for the source itself (a cached block).
  virtual bool is_cached(BlockId b) const = 0;
};

}  // namespace kvscope

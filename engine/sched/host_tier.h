// HostKvTier: the swap space. A fixed number of host block slots, each holding one device block's
// K/V bytes for every layer, so a preempted request can be brought back without recompute.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "engine/kv/ids.h"
#include "engine/kv/kv_storage.h"

namespace kvscope {

class HostKvTier {
 public:
  // `with_storage` false: slot bookkeeping only (no bytes are copied).
  HostKvTier(const KvLayout& layout, int capacity_blocks, bool with_storage);

  int capacity() const { return capacity_; }
  int num_free() const { return static_cast<int>(free_.size()); }
  int num_used() const { return capacity_ - num_free(); }
  std::size_t bytes() const { return bytes_.size(); }

  // Takes blocks.size() host slots (lowest ids first) and copies each device block into one.
  // Throws kvscope::Error when fewer slots are free (callers check num_free first).
  std::vector<int> swap_out(const KvStorage* device, std::span<const BlockId> blocks);
  // Copies slot i into device block i and frees the slots.
  void swap_in(std::span<const int> slots, KvStorage* device, std::span<const BlockId> blocks);

 private:
  std::byte* slot(int s) { return bytes_.data() + static_cast<std::size_t>(s) * block_bytes_; }
  int capacity_ = 0;
  std::size_t block_bytes_ = 0;
  std::vector<std::byte> bytes_;  // [capacity][n_layers][K tile, V tile] when with_storage
  std::vector<int> free_;         // free slot ids, popped from the back (lowest id first)
};

}  // namespace kvscope

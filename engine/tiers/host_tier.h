// HostKvTier: the swap space. A fixed number of host block slots (BlockSlots), each holding one
// device block's K/V bytes for every layer, so a preempted request can be brought back without
// recompute.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "engine/kv/ids.h"
#include "engine/kv/kv_storage.h"
#include "engine/tiers/block_slots.h"

namespace kvscope {

class HostKvTier {
 public:
  // `with_storage` false: slot bookkeeping only (no bytes are copied). Throws kvscope::Error on a
  // negative capacity or one this machine cannot map.
  HostKvTier(const KvLayout& layout, int capacity_blocks, bool with_storage);

  int capacity() const { return slots_.capacity(); }
  int num_free() const { return slots_.num_free(); }
  int num_used() const { return slots_.num_taken(); }
  std::size_t bytes() const { return slots_.ram_bytes(); }

  // Takes blocks.size() host slots (lowest ids first) and copies each device block into one.
  // Throws kvscope::Error when fewer slots are free (callers check num_free first).
  std::vector<int> swap_out(const KvStorage* device, std::span<const BlockId> blocks);
  // Copies slot i into device block i and frees the slots.
  void swap_in(std::span<const int> slots, KvStorage* device, std::span<const BlockId> blocks);

 private:
  BlockSlots slots_;  // [capacity][n_layers][K tile, V tile] in RAM when with_storage
};

}  // namespace kvscope

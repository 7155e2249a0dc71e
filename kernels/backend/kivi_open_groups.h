// KiviOpenGroups: KIVI's open groups on the device, the full-precision rows [residual][kv_dim] of
// each group not yet quantized, as KvStorage keeps them on the host for the CPU. One per device
// K/V pool (DeviceKvMirror); the CUDA backend takes an entry when a group's first token is
// written and gives it back when the group fills and is quantized into the tiles.
//
// Invariants: every entry is entry_floats floats at an offset (in floats) from base() that is a
// multiple of entry_floats; an entry is either free or open for exactly one group key; the arena
// grows by doubling (at least 4 entries), copying the open entries' rows, so base() may change
// on take() and must be read again after it; entries are never shrunk or handed back to the device.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engine/kv/ids.h"
#include "engine/kv/kv_format.h"
#include "engine/kv/kv_view.h"
#include "kernels/backend/device_buffer.h"
#include "kernels/backend/device_ops.h"

namespace kvscope {

class KiviOpenGroups {
 public:
  // entry_floats: floats of one group's rows; n_layers and block_size: the pool's (for key()).
  KiviOpenGroups(device::DeviceOps& ops, long entry_floats, int n_layers, int block_size)
      : ops_(ops), entry_floats_(entry_floats), n_layers_(n_layers), block_size_(block_size) {}

  // The group of `layer`'s K or V whose first slot is the sequence's slot `first` (it lives in
  // row first % block_size of the physical block the view maps first / block_size to).
  std::int64_t key(int layer, KvKind kind, const KvSeqView& view, int first) const;
  // The entry's offset in floats from base(), -1 when the group has none.
  long find(std::int64_t key) const;
  // The entry of a group whose first token is being written (its old one, if any, reused).
  long take(std::int64_t key);
  // The group was quantized: its entry is free again (nothing when it has none).
  void give_back(std::int64_t key);
  // Frees the entries of every group that starts in `block` (its owner went away).
  void drop_block(BlockId block);
  // Device memory: the arena's first float (nullptr before the first take()).
  float* base() const { return arena_.as<float>(); }

 private:
  void grow();

  device::DeviceOps& ops_;
  long entry_floats_;
  int n_layers_, block_size_;
  DeviceBuffer arena_;                           // [capacity_][entry_floats_] floats
  long capacity_ = 0;                            // entries the arena holds
  std::vector<long> free_;                       // offsets of free entries (taken from the back)
  std::unordered_map<std::int64_t, long> open_;  // key() -> entry offset
};

}  // namespace kvscope

// DeviceKvMirror: the device copy of one host KV pool (KvStorage), which holds the pool's bytes
// once the storage attaches it (KvStorage::attach_device): the host's layout (K region, then V
// region; tile (layer, block) of a kind at (layer * num_blocks + block) * tile_bytes), any format.
// Copy-on-write, compaction and swap reach it as byte moves, token eviction's position shift as
// key rotations (kernels/ops/kv_rotate.cuh); KIVI's open groups live in open_groups() until they
// are quantized.
//
// Ownership: the CUDA backend makes one when a sequence writes the pool's first slot and shares
// it with the storage; it lives until the storage is destroyed (expired() turns true) and the
// backend drops its reference. Its memory is allocated once, at construction, and never resized.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <utility>

#include "engine/kv/kv_storage.h"
#include "kernels/backend/device_buffer.h"
#include "kernels/backend/device_ops.h"
#include "kernels/backend/kivi_open_groups.h"

namespace kvscope {

class DeviceKvMirror final : public KvDeviceBytes {
 public:
  // Allocates the copy of `storage`'s tiles (uninitialized: the storage's first slot is yet to be
  // written). `flag` names the backend in device errors.
  DeviceKvMirror(device::DeviceOps& ops, const std::string& flag, const KvStorage& storage);

  // The K and V tiles of `layer`.
  std::pair<device::DeviceTiles, device::DeviceTiles> layer(int l) const;
  // KIVI formats' open groups (unused by the per-token formats).
  KiviOpenGroups& open_groups() { return open_; }
  const KiviOpenGroups& open_groups() const { return open_; }
  // The host storage was destroyed: nothing reads or writes this copy any more.
  bool expired() const { return storage_.expired(); }

  // KvDeviceBytes: what the host storage asks of the bytes it no longer holds.
  void move(std::span<const KvMove> moves) override;
  void read(std::span<const KvSpan> spans, std::byte* out) override;
  void write(std::span<const KvSpan> spans, const std::byte* in) override;
  void drop_staging(BlockId block) override { open_.drop_block(block); }
  void rotate_keys(std::span<const KvKeyRotation> rotations, float theta) override;

 private:
  unsigned char* at(KvKind kind, std::size_t offset) const {
    return (kind == KvKind::kKey ? k_ : v_).as<unsigned char>() + offset;
  }

  device::DeviceOps& ops_;
  std::string flag_;
  int num_blocks_, n_layers_, block_size_, kv_heads_, head_dim_;
  KiviOpenGroups open_;
  DeviceBuffer k_, v_;                     // [n_layers][num_blocks] tiles of each kind
  device::DeviceTiles k_tiles_, v_tiles_;  // layer 0
  std::weak_ptr<const void> storage_;      // expires with the host storage
  DeviceBuffer rot_;                       // {block, row, delta} per rotated key
};

}  // namespace kvscope

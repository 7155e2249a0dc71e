// See device_kv_mirror.h.
#include "kernels/backend/device_kv_mirror.h"

#include <algorithm>
#include <vector>

#include "kernels/backend/cuda_backend.h"
#include "kernels/backend/device_guard.h"

namespace kvscope {
namespace {

// Floats of one open group's rows: the larger KIVI residual of K and V times a row.
long open_entry_floats(const KvLayout& L) {
  const int kivi_k = L.k_format.is_kivi() ? L.k_format.residual : 0;
  const int kivi_v = L.v_format.is_kivi() ? L.v_format.residual : 0;
  return static_cast<long>(std::max(kivi_k, kivi_v)) * L.kv_heads * L.head_dim;
}

// Bytes of one kind's region: every layer's tile of every block.
std::size_t region_bytes(const KvLayout& L, KvKind kind) {
  return static_cast<std::size_t>(L.n_layers) * L.num_blocks * L.tile_bytes(kind);
}

// Layer 0's tiles of `kind` in `buffer`, as the kernels address them.
device::DeviceTiles tiles_of(const KvLayout& L, const DeviceBuffer& buffer, KvKind kind) {
  const KvFormat& f = L.format(kind);
  const int row = L.row_heads(kind) * L.row_head_dim(kind);  // a latent cache's rows differ
  return device::DeviceTiles{buffer.as<unsigned char>(), static_cast<long>(L.tile_bytes(kind)),
                             cuda_kv_code(f, kind), f.effective_group(row),
                             f.is_kivi() ? f.residual : 0};
}

}  // namespace

DeviceKvMirror::DeviceKvMirror(device::DeviceOps& ops, const std::string& flag,
                               const KvStorage& storage)
    : ops_(ops),
      flag_(flag),
      num_blocks_(storage.layout().num_blocks),
      n_layers_(storage.layout().n_layers),
      block_size_(storage.layout().block_size),
      kv_heads_(storage.layout().kv_heads),
      head_dim_(storage.layout().head_dim),
      open_(ops, open_entry_floats(storage.layout()), n_layers_, block_size_) {
  const KvLayout& L = storage.layout();
  k_ = DeviceBuffer(ops_, region_bytes(L, KvKind::kKey));
  v_ = DeviceBuffer(ops_, region_bytes(L, KvKind::kValue));
  k_tiles_ = tiles_of(L, k_, KvKind::kKey);
  v_tiles_ = tiles_of(L, v_, KvKind::kValue);
  storage_ = storage.liveness();
}

std::pair<device::DeviceTiles, device::DeviceTiles> DeviceKvMirror::layer(int l) const {
  device::DeviceTiles a = k_tiles_, b = v_tiles_;
  a.base += static_cast<long>(l) * num_blocks_ * a.tile_bytes;
  b.base += static_cast<long>(l) * num_blocks_ * b.tile_bytes;
  return {a, b};
}

void DeviceKvMirror::move(std::span<const KvMove> moves) {
  guarded(flag_, [&] {
    for (const KvMove& m : moves)
      ops_.copy_on_device(at(m.kind, m.dst), at(m.kind, m.src), m.bytes);
  });
}

void DeviceKvMirror::read(std::span<const KvSpan> spans, std::byte* out) {
  guarded(flag_, [&] {
    for (const KvSpan& s : spans) {
      ops_.to_host(out, at(s.kind, s.offset), s.bytes);
      out += s.bytes;
    }
  });
}

void DeviceKvMirror::write(std::span<const KvSpan> spans, const std::byte* in) {
  guarded(flag_, [&] {
    for (const KvSpan& s : spans) {
      ops_.to_device(at(s.kind, s.offset), in, s.bytes);
      in += s.bytes;
    }
  });
}

void DeviceKvMirror::rotate_keys(std::span<const KvKeyRotation> rotations, float theta) {
  std::vector<int> rot;
  rot.reserve(rotations.size() * 3);
  for (const KvKeyRotation& r : rotations) {
    rot.push_back(static_cast<int>(r.block.value));
    rot.push_back(r.offset);
    rot.push_back(r.delta);
  }
  guarded(flag_, [&] {
    // The rotations' buffer is kept and grown, not allocated per shift (an allocation
    // synchronizes the device); the launch before read it in stream order.
    const std::size_t bytes = rot.size() * sizeof(int);
    if (rot_.bytes() < bytes) rot_ = DeviceBuffer(ops_, std::max(bytes, 2 * rot_.bytes()));
    ops_.to_device(rot_.as<void>(), rot.data(), bytes);
    ops_.rotate_keys(k_tiles_, static_cast<long>(num_blocks_) * k_tiles_.tile_bytes, n_layers_,
                     rot_.as<int>(), static_cast<int>(rotations.size()), block_size_, kv_heads_,
                     head_dim_, theta);
  });
}

}  // namespace kvscope

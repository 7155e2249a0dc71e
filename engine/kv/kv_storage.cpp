// KvStorage allocation, block copies and KIVI staging buffers.
#include "engine/kv/kv_storage.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "engine/common/config.h"
#include "engine/common/error.h"

namespace kvscope {

KvLayout kv_layout_for(const ModelConfig& model, int block_size, int num_blocks,
                       const KvFormat& k_format, const KvFormat& v_format) {
  KvLayout layout;
  layout.n_layers = model.n_layers;
  layout.kv_heads = model.n_kv_heads;
  layout.head_dim = model.head_dim();
  layout.block_size = block_size;
  layout.num_blocks = num_blocks;
  layout.k_format = k_format;
  layout.v_format = v_format;
  return layout;
}

KvStorage::KvStorage(const KvLayout& layout) : layout_(layout) {
  static std::atomic<std::uint64_t> next_id{1};
  id_ = next_id.fetch_add(1, std::memory_order_relaxed);
  const bool latent = layout.is_latent();
  layout.k_format.validate(layout.block_size, layout.row_heads(KvKind::kKey),
                           layout.row_head_dim(KvKind::kKey),
                           latent ? "latent format" : "K format");
  layout.v_format.validate(layout.block_size, layout.row_heads(KvKind::kValue),
                           layout.row_head_dim(KvKind::kValue),
                           latent ? "latent RoPE-key format" : "V format");
  const std::size_t k_bytes = static_cast<std::size_t>(layout.n_layers) * layout.num_blocks *
                              layout.tile_bytes(KvKind::kKey);
  v_offset_ = (k_bytes + 63) / 64 * 64;
  total_bytes_ = k_bytes + static_cast<std::size_t>(layout.n_layers) * layout.num_blocks *
                               layout.tile_bytes(KvKind::kValue);
  data_ = ZeroedBuffer(v_offset_ + total_bytes_ - k_bytes);
}

void KvStorage::attach_device(const std::shared_ptr<KvDeviceBytes>& device) {
  // Once a device held the bytes, they are nowhere else: a second holder would start from
  // uninitialized memory.
  if (device_attached_) {
    throw Error("kv storage",
                "expected one backend holding the pool's bytes, got a second one attaching");
  }
  device_ = device;
  device_attached_ = true;
}

std::shared_ptr<KvDeviceBytes> KvStorage::device() const {
  if (!device_attached_) return nullptr;
  auto d = device_.lock();
  if (d == nullptr) {
    throw Error("kv storage",
                "the backend that held this pool's bytes is gone; expected it to outlive the "
                "pool's use");
  }
  return d;
}

void KvStorage::apply(std::span<const KvMove> moves) {
  if (auto d = device()) return d->move(moves);
  for (const KvMove& m : moves) std::memmove(base(m.kind) + m.dst, base(m.kind) + m.src, m.bytes);
}

void KvStorage::check_block(BlockId b, const char* what) const {
  if (b.value < 0 || b.value >= layout_.num_blocks) {
    throw InternalError("kv storage", std::string(what) + " block " + std::to_string(b.value) +
                                          " outside the pool's " +
                                          std::to_string(layout_.num_blocks));
  }
}

void KvStorage::copy_block(BlockId src, BlockId dst) {
  check_block(src, "copy_block source");
  check_block(dst, "copy_block destination");
  if (src == dst) return;
  std::vector<KvMove> moves;
  for (int layer = 0; layer < layout_.n_layers; ++layer) {
    for (KvKind kind : {KvKind::kKey, KvKind::kValue}) {
      moves.push_back({kind, tile_offset(layer, kind, src), tile_offset(layer, kind, dst),
                       layout_.tile_bytes(kind)});
    }
  }
  apply(moves);
}

void KvStorage::copy_slot(BlockId src, int src_offset, BlockId dst, int dst_offset) {
  if (layout_.k_format.is_kivi() || layout_.v_format.is_kivi()) {
    throw Error("kv storage",
                "cannot move a token slot in a KIVI format (keys are quantized per "
                "channel over groups of consecutive slots); expected a per-token format");
  }
  check_block(src, "copy_slot source");
  check_block(dst, "copy_slot destination");
  for (int offset : {src_offset, dst_offset}) {
    if (offset < 0 || offset >= layout_.block_size) {
      throw InternalError("kv storage", "copy_slot offset " + std::to_string(offset) +
                                            " outside a block of " +
                                            std::to_string(layout_.block_size));
    }
  }
  if (src == dst && src_offset == dst_offset) return;
  const auto so = static_cast<std::size_t>(src_offset), dof = static_cast<std::size_t>(dst_offset);
  std::vector<KvMove> moves;
  for (int layer = 0; layer < layout_.n_layers; ++layer) {
    for (KvKind kind : {KvKind::kKey, KvKind::kValue}) {
      // Tile: [block_size][row_bytes] codes, then [block_size][token_meta_bytes] scales.
      const KvFormat& f = layout_.format(kind);
      const std::size_t row = f.row_bytes(layout_.kv_heads, layout_.head_dim);
      const std::size_t meta = f.token_meta_bytes(layout_.kv_heads, layout_.head_dim, kind);
      const std::size_t s = tile_offset(layer, kind, src), d = tile_offset(layer, kind, dst);
      moves.push_back({kind, s + so * row, d + dof * row, row});
      if (meta > 0) {
        const std::size_t meta_base = static_cast<std::size_t>(layout_.block_size) * row;
        moves.push_back({kind, s + meta_base + so * meta, d + meta_base + dof * meta, meta});
      }
    }
  }
  apply(moves);
}

void KvStorage::check_rotations(std::span<const KvKeyRotation> rotations) const {
  if (layout_.is_latent() || layout_.k_format.is_kivi()) {
    throw InternalError("kv storage",
                        "rotate_keys on a latent or KIVI pool (token eviction refuses both)");
  }
  for (const KvKeyRotation& r : rotations) {
    check_block(r.block, "rotate_keys");
    if (r.offset < 0 || r.offset >= layout_.block_size) {
      throw InternalError("kv storage", "rotate_keys offset " + std::to_string(r.offset) +
                                            " outside a block of " +
                                            std::to_string(layout_.block_size));
    }
  }
}

bool KvStorage::rotate_keys_on_device(std::span<const KvKeyRotation> rotations, float theta) {
  check_rotations(rotations);
  auto d = device();
  if (d == nullptr) return false;
  if (!rotations.empty()) d->rotate_keys(rotations, theta);
  return true;
}

std::vector<KvSpan> KvStorage::block_spans(BlockId block) const {
  check_block(block, "read/write_block");
  std::vector<KvSpan> spans;
  for (int layer = 0; layer < layout_.n_layers; ++layer) {
    for (KvKind kind : {KvKind::kKey, KvKind::kValue})
      spans.push_back({kind, tile_offset(layer, kind, block), layout_.tile_bytes(kind)});
  }
  return spans;
}

void KvStorage::read_block(BlockId block, std::byte* out) const {
  const std::vector<KvSpan> spans = block_spans(block);
  if (auto d = device()) return d->read(spans, out);
  for (const KvSpan& s : spans) {
    std::memcpy(out, const_cast<KvStorage*>(this)->base(s.kind) + s.offset, s.bytes);
    out += s.bytes;
  }
}

void KvStorage::write_block(BlockId block, const std::byte* in) {
  const std::vector<KvSpan> spans = block_spans(block);
  if (auto d = device()) return d->write(spans, in);
  for (const KvSpan& s : spans) {
    std::memcpy(base(s.kind) + s.offset, in, s.bytes);
    in += s.bytes;
  }
}

float* KvStorage::staging(int layer, KvKind kind, BlockId block, int offset, bool create) {
  auto& map = staging_[static_cast<int>(kind)];
  const std::int64_t key = staging_key(layer, block, offset);
  auto it = map.find(key);
  if (!create) return it == map.end() ? nullptr : it->second.data();
  const std::size_t n = static_cast<std::size_t>(layout_.format(kind).residual) *
                        layout_.row_heads(kind) * layout_.row_head_dim(kind);
  if (it == map.end()) {
    it = map.emplace(key, std::vector<float>(n, 0.0f)).first;
    staging_bytes_ += n * sizeof(float);
    peak_staging_bytes_ = std::max(peak_staging_bytes_, staging_bytes_);
  } else {
    std::fill(it->second.begin(), it->second.end(), 0.0f);
  }
  return it->second.data();
}

const float* KvStorage::staging(int layer, KvKind kind, BlockId block, int offset) const {
  const auto& map = staging_[static_cast<int>(kind)];
  auto it = map.find(staging_key(layer, block, offset));
  return it == map.end() ? nullptr : it->second.data();
}

void KvStorage::drop_staging(int layer, KvKind kind, BlockId block, int offset) {
  auto& map = staging_[static_cast<int>(kind)];
  auto it = map.find(staging_key(layer, block, offset));
  if (it == map.end()) return;
  staging_bytes_ -= it->second.size() * sizeof(float);
  map.erase(it);
}

void KvStorage::drop_block_staging(BlockId block) {
  if (const std::shared_ptr<KvDeviceBytes> d = device_attached_ ? device_.lock() : nullptr)
    d->drop_staging(block);
  if (staging_[0].empty() && staging_[1].empty()) return;
  for (int layer = 0; layer < layout_.n_layers; ++layer) {
    for (KvKind kind : {KvKind::kKey, KvKind::kValue}) {
      for (int offset = 0; offset < layout_.block_size; ++offset)
        drop_staging(layer, kind, block, offset);
    }
  }
}

}  // namespace kvscope

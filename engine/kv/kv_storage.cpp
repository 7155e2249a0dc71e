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

void KvStorage::copy_block(BlockId src, BlockId dst) {
  ++byte_copies_;
  for (int layer = 0; layer < layout_.n_layers; ++layer) {
    for (KvKind kind : {KvKind::kKey, KvKind::kValue}) {
      std::memcpy(tile(layer, kind, dst), tile(layer, kind, src), layout_.tile_bytes(kind));
    }
  }
}

void KvStorage::copy_slot(BlockId src, int src_offset, BlockId dst, int dst_offset) {
  if (layout_.k_format.is_kivi() || layout_.v_format.is_kivi()) {
    throw Error("kv storage",
                "cannot move a token slot in a KIVI format (keys are quantized per "
                "channel over groups of consecutive slots); expected a per-token format");
  }
  ++byte_copies_;
  const int bs = layout_.block_size;
  for (int layer = 0; layer < layout_.n_layers; ++layer) {
    for (KvKind kind : {KvKind::kKey, KvKind::kValue}) {
      // Tile: [block_size][row_bytes] codes, then [block_size][token_meta_bytes] scales.
      const KvFormat& f = layout_.format(kind);
      const std::size_t row = f.row_bytes(layout_.kv_heads, layout_.head_dim);
      const std::size_t meta = f.token_meta_bytes(layout_.kv_heads, layout_.head_dim, kind);
      const std::byte* s = tile(layer, kind, src);
      std::byte* d = tile(layer, kind, dst);
      std::memmove(d + static_cast<std::size_t>(dst_offset) * row,
                   s + static_cast<std::size_t>(src_offset) * row, row);
      if (meta > 0) {
        const std::size_t meta_base = static_cast<std::size_t>(bs) * row;
        std::memmove(d + meta_base + static_cast<std::size_t>(dst_offset) * meta,
                     s + meta_base + static_cast<std::size_t>(src_offset) * meta, meta);
      }
    }
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
  if (staging_[0].empty() && staging_[1].empty()) return;
  for (int layer = 0; layer < layout_.n_layers; ++layer) {
    for (KvKind kind : {KvKind::kKey, KvKind::kValue}) {
      for (int offset = 0; offset < layout_.block_size; ++offset)
        drop_staging(layer, kind, block, offset);
    }
  }
}

}  // namespace kvscope

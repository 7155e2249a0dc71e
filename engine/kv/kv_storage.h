// KvStorage: the bytes of every physical block of the pool, laid out layer-major as vLLM does, so
// that a run of consecutive blocks is one contiguous region per layer (the contiguous baseline):
//   K: [n_layers][num_blocks][tile]   V: [n_layers][num_blocks][tile]
//   tile = [block_size][kv_heads][head_dim] values in the layer's KvFormat (+ its metadata)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "engine/kv/ids.h"
#include "engine/kv/kv_format.h"

namespace kvscope {

enum class KvKind : int { kKey = 0, kValue = 1 };

struct KvLayout {
  int n_layers = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  int num_blocks = 0;
  KvFormat k_format;
  KvFormat v_format;

  std::size_t tile_bytes(KvKind kind) const {
    const KvFormat& f = kind == KvKind::kKey ? k_format : v_format;
    return f.tile_bytes(block_size, kv_heads, head_dim);
  }
  // Bytes one block occupies across all layers, K and V.
  std::size_t block_bytes() const {
    return static_cast<std::size_t>(n_layers) * (tile_bytes(KvKind::kKey) + tile_bytes(KvKind::kValue));
  }
  // Exact KV bytes per token for all layers (tile bytes / block_size).
  double bytes_per_token() const { return static_cast<double>(block_bytes()) / block_size; }
};

class KvStorage {
 public:
  explicit KvStorage(const KvLayout& layout);
  const KvLayout& layout() const { return layout_; }
  std::size_t total_bytes() const { return total_bytes_; }

  std::byte* tile(int layer, KvKind kind, BlockId block) {
    return base(kind) + (static_cast<std::size_t>(layer) * layout_.num_blocks + block.value) *
                            layout_.tile_bytes(kind);
  }
  const std::byte* tile(int layer, KvKind kind, BlockId block) const {
    return const_cast<KvStorage*>(this)->tile(layer, kind, block);
  }
  // Copies every layer's K and V tile of `src` over `dst` (copy-on-write, swap-in).
  void copy_block(BlockId src, BlockId dst);

 private:
  std::byte* base(KvKind kind) {
    return data_.get() + (kind == KvKind::kKey ? 0 : k_bytes_);
  }
  KvLayout layout_;
  std::size_t k_bytes_ = 0;
  std::size_t total_bytes_ = 0;
  std::unique_ptr<std::byte[]> data_;
};

}  // namespace kvscope

// KvStorage allocation and block copies.
#include "engine/kv/kv_storage.h"

#include <cstring>

namespace kvscope {

KvStorage::KvStorage(const KvLayout& layout) : layout_(layout) {
  k_bytes_ = static_cast<std::size_t>(layout.n_layers) * layout.num_blocks * layout.tile_bytes(KvKind::kKey);
  total_bytes_ = k_bytes_ + static_cast<std::size_t>(layout.n_layers) * layout.num_blocks *
                                layout.tile_bytes(KvKind::kValue);
  data_ = std::make_unique<std::byte[]>(total_bytes_);  // zero-initialized
}

void KvStorage::copy_block(BlockId src, BlockId dst) {
  for (int layer = 0; layer < layout_.n_layers; ++layer) {
    for (KvKind kind : {KvKind::kKey, KvKind::kValue}) {
      std::memcpy(tile(layer, kind, dst), tile(layer, kind, src), layout_.tile_bytes(kind));
    }
  }
}

}  // namespace kvscope

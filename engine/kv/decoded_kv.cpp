#include "engine/kv/decoded_kv.h"

#include "engine/common/error.h"

namespace kvscope {

DecodedKvCache::DecodedKvCache(const KvStorage& storage, int capacity)
    : storage_(&storage), capacity_(capacity) {
  const KvLayout& L = storage.layout();
  if (L.is_latent() || capacity < 0) {
    throw InternalError("DecodedKvCache", L.is_latent() ? "a latent (MLA) pool has no K/V heads"
                                                        : "capacity " + std::to_string(capacity));
  }
  const std::size_t floats = static_cast<std::size_t>(capacity) * L.kv_heads * L.head_dim;
  layers_.resize(static_cast<std::size_t>(L.n_layers));
  for (DecodedKv& d : layers_) {
    d.n = capacity;
    d.kv_heads = L.kv_heads;
    d.head_dim = L.head_dim;
    d.k.resize(floats);
    d.v.resize(floats);
  }
  group_ = {L.k_format.is_kivi() ? L.k_format.residual : 0,
            L.v_format.is_kivi() ? L.v_format.residual : 0};
  raw_.resize(layers_.size());
  for (DecodedKv& d : raw_) {
    d.n = capacity;
    d.kv_heads = L.kv_heads;
    d.head_dim = L.head_dim;
    if (group_[0] > 0) d.k.resize(floats);
    if (group_[1] > 0) d.v.resize(floats);
  }
  clear();
}

void DecodedKvCache::clear() {
  final_.assign(layers_.size(), {0, 0});
  written_.assign(layers_.size(), 0);
}

}  // namespace kvscope

// Random one-layer caches for the attention micro-benchmarks.
#include "cli/bench_cache.h"

#include <algorithm>

#include "engine/quant/kv_codec.h"

namespace kvscope::cli {

OneLayerCache random_one_layer_cache(KvLayout L, int tokens, std::mt19937& rng) {
  L.n_layers = 1;
  L.num_blocks = (tokens + L.block_size - 1) / L.block_size;
  OneLayerCache cache{std::make_unique<KvStorage>(L), {}, 0};
  for (int b = 0; b < L.num_blocks; ++b) cache.blocks.emplace_back(b);
  std::shuffle(cache.blocks.begin(), cache.blocks.end(), rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto k_len =
      static_cast<std::size_t>(L.row_heads(KvKind::kKey) * L.row_head_dim(KvKind::kKey));
  const auto v_len =
      static_cast<std::size_t>(L.row_heads(KvKind::kValue) * L.row_head_dim(KvKind::kValue));
  std::vector<float> k(k_len), v(v_len);
  for (int t = 0; t < tokens; ++t) {
    for (float& x : k) x = normal(rng);
    for (float& x : v) x = normal(rng);
    cache.tokens = t + 1;
    quant::write_token(cache.view(), 0, KvKind::kKey, k.data());
    if (v_len > 0) quant::write_token(cache.view(), 0, KvKind::kValue, v.data());
  }
  return cache;
}

}  // namespace kvscope::cli

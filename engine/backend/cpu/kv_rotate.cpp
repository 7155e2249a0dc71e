#include "engine/backend/cpu/kv_rotate.h"

#include <algorithm>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/kv/kv_view.h"
#include "engine/quant/kv_codec.h"

namespace kvscope::cpu {

void rotate_keys(KvStorage& storage, std::span<const KvKeyRotation> rotations, float theta) {
  const KvLayout& L = storage.layout();
  const int kv_dim = L.kv_heads * L.head_dim;
  std::vector<float> row(static_cast<std::size_t>(kv_dim)), tmp(static_cast<std::size_t>(kv_dim));
  std::vector<float> cos_sin(static_cast<std::size_t>(L.head_dim));
  bool have_angles = false;
  int angles_for = 0;
  for (const KvKeyRotation& r : rotations) {
    // A shift moves most keys by the same delta: the angles once per run of equal deltas.
    if (!have_angles || r.delta != angles_for) {
      angles_for = r.delta;
      rope_cos_sin(angles_for, L.head_dim, theta, cos_sin.data());
      have_angles = true;
    }
    // The token's slot as the write slot of a one-block view: write_token re-encodes it there.
    KvSeqView v;
    v.storage = &storage;
    v.blocks = std::span<const BlockId>(&r.block, 1);
    v.num_slots = r.offset + 1;
    for (int layer = 0; layer < L.n_layers; ++layer) {
      if (L.k_format.dtype == KvDtype::kF32) {  // rotate in place
        float* key = reinterpret_cast<float*>(storage.tile(layer, KvKind::kKey, r.block)) +
                     static_cast<std::size_t>(r.offset) * static_cast<std::size_t>(kv_dim);
        rope_keys(key, kv_dim, L.head_dim, cos_sin.data());
        continue;
      }
      const quant::TileReader reader(v, layer, KvKind::kKey);
      for (int h = 0; h < L.kv_heads; ++h) {
        const float* head = reader.head(r.offset, h, tmp.data());
        std::copy(head, head + L.head_dim, row.begin() + static_cast<long>(h) * L.head_dim);
      }
      rope_keys(row.data(), kv_dim, L.head_dim, cos_sin.data());
      quant::write_token(v, layer, KvKind::kKey, row.data());
    }
  }
}

}  // namespace kvscope::cpu

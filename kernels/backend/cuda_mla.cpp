// See cuda_mla.h.
#include "kernels/backend/cuda_mla.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/common/error.h"
#include "engine/mla/mla_codec.h"

namespace kvscope {

template <class T>
const T* MlaOnDevice::upload(DeviceBuffer& b, const std::vector<T>& host) {
  if (host.empty()) return nullptr;
  T* d = grown(ops_, b, host.size() * sizeof(T)).template as<T>();
  ops_.to_device(d, host.data(), host.size() * sizeof(T));
  return d;
}

const MlaOnDevice::Layer& MlaOnDevice::matrices(const MlaCodec& m, int layer) {
  if (m.id == 0)
    throw InternalError("cuda backend", "an MLA codec without an id (not made by make_mla_codec)");
  if (layer < 0 || layer >= m.n_layers || static_cast<int>(m.layers.size()) != m.n_layers) {
    throw InternalError("cuda backend", "MLA layer " + std::to_string(layer) + " of a codec of " +
                                            std::to_string(m.layers.size()) + " layers");
  }
  if (codec_id_ != m.id) {  // another conversion: its matrices replace the last one's
    layers_.clear();
    layers_.resize(static_cast<std::size_t>(m.n_layers));
    upload(nope_index_, m.nope_index);
    upload(rope_index_, m.rope_index);
    codec_id_ = m.id;
  }
  Layer& l = layers_[static_cast<std::size_t>(layer)];
  if (l.u_t.bytes() == 0) {
    const MlaCodecLayer& w = m.layers[static_cast<std::size_t>(layer)];
    upload(l.u_t, w.u_t);
    upload(l.w_uk, w.w_uk);
    upload(l.w_uv, w.w_uv);
  }
  return l;
}

void MlaOnDevice::write(const MlaCodec& m, int layer, const float* k, const float* v, int pos,
                        const LatentSequence& seq, int slot) {
  const Layer& w = matrices(m, layer);
  const int hd = m.head_dim, kv_dim = m.kv_heads * hd, nd = m.nope_dims, rd = m.rope_dims();
  const int R = m.rank(), rows = m.key_rows() + kv_dim;
  auto* row = grown(ops_, row_, static_cast<std::size_t>(rows) * 4).as<float>();
  auto* rope =
      grown(ops_, rope_, static_cast<std::size_t>(std::max(1, m.kv_heads * rd)) * 4).as<float>();
  ops_.mla_latent_input(row, rope, k, v, nope_index_.as<int>(), rope_index_.as<int>(), m.kv_heads,
                        hd, nd, rd, pos, m.rope_theta);
  auto* c = grown(ops_, c_, static_cast<std::size_t>(R) * 4).as<float>();
  ops_.gemm(c, row, w.u_t.as<void>(), device::GemmType::kF32, 1, rows, R, false);  // c = U^T row
  // The latent is one row of R values in the K region, the RoPE keys rope_heads x rd in V.
  device::DeviceTiles skip = seq.rope;
  skip.base = nullptr;
  ops_.kv_write(seq.latents, skip, seq.block_table, slot, seq.block_size, c, c, 1, R);
  if (m.rope_heads() == 0) return;
  skip = seq.latents;
  skip.base = nullptr;
  ops_.kv_write(skip, seq.rope, seq.block_table, slot, seq.block_size, rope, rope, m.rope_heads(),
                rd);
}

void MlaOnDevice::attend(const MlaCodec& m, int layer, const float* q, float* out, int query_pos,
                         const LatentSequence& seq, const std::vector<int>& positions,
                         float* weights) {
  const Layer& w = matrices(m, layer);
  const int hd = m.head_dim, kv_dim = m.kv_heads * hd, R = m.rank(), n = seq.num_slots;
  if (m.options.mode == MlaMode::kReconstruct) {
    // Mode A: every slot's latent decoded, its K and V rebuilt (two GEMMs; evicted slots too, which
    // attention then skips), RoPE at its position, then paged attention over the rebuilt fp32 rows
    // as one block of n slots.
    auto* c = grown(ops_, c_, static_cast<std::size_t>(n) * R * 4).as<float>();
    ops_.kv_gather(c, seq.latents, seq.block_table, n, 1, R, seq.block_size);
    const std::size_t rows_bytes = static_cast<std::size_t>(n) * kv_dim * 4;
    auto* keys = grown(ops_, keys_, rows_bytes).as<float>();
    auto* values = grown(ops_, values_, rows_bytes).as<float>();
    ops_.gemm(keys, c, w.w_uk.as<void>(), device::GemmType::kF32, n, R, kv_dim, false);
    ops_.gemm(values, c, w.w_uv.as<void>(), device::GemmType::kF32, n, R, kv_dim, false);
    ops_.rope(keys, keys, upload(ints_, positions), n, 0, kv_dim, hd, m.rope_theta);
    device::PagedPool p;
    p.k = {keys_.as<unsigned char>(), static_cast<long>(rows_bytes), device::KvCode::kF32, 0, 0};
    p.v = {values_.as<unsigned char>(), static_cast<long>(rows_bytes), device::KvCode::kF32, 0, 0};
    if (zero_table_.bytes() == 0) upload(zero_table_, std::vector<int>{0});  // constant: once
    p.block_table = zero_table_.as<int>();
    p.num_slots = n;
    p.block_size = n;
    p.kv_heads = m.kv_heads;
    p.head_dim = hd;
    p.live = seq.live;
    ops_.paged_attention(out, q, p, m.n_heads, weights);
    return;
  }
  // Mode B: the query absorbs W_uk, attention runs over the latents (split along the sequence
  // past latent_max_slots()), W_uv expands the context.
  const int H = m.n_heads, rd = m.rope_dims();
  auto* q_lat = grown(ops_, q_lat_, static_cast<std::size_t>(H) * R * 4).as<float>();
  auto* q_rope =
      grown(ops_, q_rope_, static_cast<std::size_t>(H) * std::max(1, rd) * 4).as<float>();
  ops_.mla_absorb_query(q_lat, q_rope, q, w.w_uk.as<float>(), nope_index_.as<int>(),
                        rope_index_.as<int>(), H, m.kv_heads, hd, m.nope_dims, rd, R, query_pos,
                        m.rope_theta);
  device::LatentPool p;
  p.latents = seq.latents;
  p.rope = seq.rope;
  p.block_table = seq.block_table;
  p.num_slots = n;
  p.block_size = seq.block_size;
  p.rank = R;
  p.rope_heads = m.rope_heads();
  p.rope_dim = rd;
  p.live = seq.live;
  auto* ctx = grown(ops_, ctx_, static_cast<std::size_t>(H) * R * 4).as<float>();
  ops_.mla_latent_attention(ctx, weights, q_lat, q_rope, p, H, std::sqrt(static_cast<float>(hd)));
  // out_h = W_uv_g ctx_h: the heads of KV head g are rows [g * group, (g + 1) * group) of ctx and
  // of out, and W_uv_g is W_uv's rows [g * hd, (g + 1) * hd).
  const int group = H / m.kv_heads;
  for (int g = 0; g < m.kv_heads; ++g) {
    ops_.gemm(out + static_cast<long>(g) * group * hd, ctx + static_cast<long>(g) * group * R,
              w.w_uv.as<float>() + static_cast<long>(g) * hd * R, device::GemmType::kF32, group, R,
              hd, false);
  }
}

}  // namespace kvscope

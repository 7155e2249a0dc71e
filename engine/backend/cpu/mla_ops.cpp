// CPU MLA ops: latent writes (undo RoPE, project to the latent), mode A attention (rebuild K/V
// from latents) and mode B absorbed attention (scores and context on latents).
#include "engine/backend/cpu/mla_ops.h"

#include "engine/common/openmp.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "engine/common/error.h"
#include "engine/mla/mla_codec.h"
#include "engine/quant/kv_codec.h"

namespace kvscope::cpu {
namespace {

// Below this many multiply-adds a parallel region costs more than it saves (measured on a loaded
// 2-core machine: a region per layer at stories260K sizes made decode 50x slower).
constexpr long kParallelThreshold = 1L << 22;

inline float dot(const float* a, const float* b, int n) {
  float acc = 0.0f;  // vectorized with a tree reduction (-fassociative-math, engine/CMakeLists.txt)
  for (int j = 0; j < n; ++j) acc += a[j] * b[j];
  return acc;
}

// RoPE's rotation at one position: cos and sin per adjacent pair [head_dim / 2], with the same
// float arithmetic as cpu::rope so that rotating back cancels it.
struct Rotation {
  std::vector<float> cos, sin;
  Rotation(int head_dim, int pos, float theta) {
    for (int i = 0; i < head_dim; i += 2) {
      const float freq =
          1.0f / std::pow(theta, static_cast<float>(i) / static_cast<float>(head_dim));
      const float val = static_cast<float>(pos) * freq;
      cos.push_back(std::cos(val));
      sin.push_back(std::sin(val));
    }
  }
  // Rotates the pairs of x[head_dim] forward (sign 1) or back (sign -1).
  void apply(float* x, int head_dim, float sign) const {
    for (int i = 0; i < head_dim; i += 2) {
      const float fcr = cos[static_cast<std::size_t>(i / 2)];
      const float fci = sign * sin[static_cast<std::size_t>(i / 2)];
      const float v0 = x[i], v1 = x[i + 1];
      x[i] = v0 * fcr - v1 * fci;
      x[i + 1] = v0 * fci + v1 * fcr;
    }
  }
};

int slot_position(const KvSeqView& view, int slot) {
  return view.slot_pos != nullptr ? view.slot_pos[slot] : slot;
}

bool is_live(const KvSeqView& view, int slot) {
  return view.slot_live == nullptr || view.slot_live[slot] != 0;
}

const MlaCodec& checked_codec(const KvSeqView& view, int layer) {
  const MlaCodec& m = *view.mla;
  const KvLayout& L = view.storage->layout();
  if (!L.is_latent() || L.latent_dim != m.rank() || L.rope_heads != m.rope_heads() ||
      (m.rope_heads() > 0 && L.rope_dim != m.rope_dims())) {
    fail_expected("kv cache: MLA view",
                  "a latent pool of rank " + std::to_string(m.rank()) + " with " +
                      std::to_string(m.rope_heads()) + " RoPE keys of " +
                      std::to_string(m.rope_dims()),
                  "a pool with latent_dim " + std::to_string(L.latent_dim) + ", " +
                      std::to_string(L.rope_heads) + " RoPE keys of " + std::to_string(L.rope_dim));
  }
  if (layer < 0 || layer >= m.n_layers) {
    fail_expected("kv cache: MLA layer", "[0, " + std::to_string(m.n_layers) + ")",
                  std::to_string(layer));
  }
  return m;
}

// Softmax of att[n] in place with llama2.c's arithmetic; -inf (evicted) becomes 0.
void softmax_row(float* att, int n, float max_score) {
  float sum = 0.0f;
  for (int t = 0; t < n; ++t) {
    att[t] = att[t] == -INFINITY ? 0.0f : std::exp(att[t] - max_score);
    sum += att[t];
  }
  for (int t = 0; t < n; ++t) att[t] /= sum;
}

void notify(AttentionObserver* observer, int layer, int n_heads, int query_pos, int n,
            const float* weights) {
  if (observer == nullptr) return;
  for (int h = 0; h < n_heads; ++h) {
    observer->on_attention(layer, h, query_pos,
                           std::span<const float>(weights + static_cast<std::size_t>(h) * n,
                                                  static_cast<std::size_t>(n)));
  }
}

// Mode A: rebuild K (RoPE at each slot's position) and V for every live slot, then attend.
void attention_reconstruct(const KvSeqView& view, int layer, const MlaCodec& m,
                           const AttentionShape& shape, const float* q, float* out,
                           std::vector<float>& scratch) {
  const int n = view.num_slots, hd = m.head_dim, kv_dim = m.kv_heads * hd, R = m.rank();
  const int group = shape.n_heads / shape.kv_heads;
  const MlaCodecLayer& w = m.layers[static_cast<std::size_t>(layer)];
  const int threads =
      static_cast<long>(n) * 2 * kv_dim * R >= kParallelThreshold ? omp_get_max_threads() : 1;
  // scratch: weights [n_heads][n], K [n][kv_dim], V [n][kv_dim], decode space [threads][R].
  const std::size_t wsz = static_cast<std::size_t>(shape.n_heads) * n;
  const std::size_t kvsz = static_cast<std::size_t>(n) * kv_dim;
  const std::size_t need = wsz + 2 * kvsz + static_cast<std::size_t>(threads) * R;
  if (scratch.size() < need) scratch.resize(need);
  float* weights = scratch.data();
  float* keys = weights + wsz;
  float* values = keys + kvsz;
  float* decode = values + kvsz;
  const quant::TileReader latents(view, layer, KvKind::kKey);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int t = 0; t < n; ++t) {
    if (!is_live(view, t)) continue;
    const float* c =
        latents.head(t, 0, decode + static_cast<std::size_t>(omp_get_thread_num()) * R);
    float* kt = keys + static_cast<std::size_t>(t) * kv_dim;
    float* vt = values + static_cast<std::size_t>(t) * kv_dim;
    for (int i = 0; i < kv_dim; ++i) {
      kt[i] = dot(w.w_uk.data() + static_cast<std::size_t>(i) * R, c, R);
      vt[i] = dot(w.w_uv.data() + static_cast<std::size_t>(i) * R, c, R);
    }
    const Rotation rot(hd, slot_position(view, t), m.rope_theta);
    for (int g = 0; g < m.kv_heads; ++g) rot.apply(kt + static_cast<std::size_t>(g) * hd, hd, 1.0f);
  }
  const float sqrt_hd = std::sqrt(static_cast<float>(hd));
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int h = 0; h < shape.n_heads; ++h) {
    const float* qh = q + static_cast<std::size_t>(h) * hd;
    const std::size_t off = static_cast<std::size_t>(h / group) * hd;
    float* att = weights + static_cast<std::size_t>(h) * n;
    float max_score = -INFINITY;
    for (int t = 0; t < n; ++t) {
      if (!is_live(view, t)) {
        att[t] = -INFINITY;
        continue;
      }
      att[t] = dot(qh, keys + static_cast<std::size_t>(t) * kv_dim + off, hd) / sqrt_hd;
      max_score = std::max(max_score, att[t]);
    }
    softmax_row(att, n, max_score);
    float* oh = out + static_cast<std::size_t>(h) * hd;
    std::memset(oh, 0, static_cast<std::size_t>(hd) * sizeof(float));
    for (int t = 0; t < n; ++t) {
      const float a = att[t];
      if (a == 0.0f) continue;
      const float* vh = values + static_cast<std::size_t>(t) * kv_dim + off;
      for (int i = 0; i < hd; ++i) oh[i] += a * vh[i];
    }
  }
}

// Mode B: absorb W_uk into the query, attend over latents, expand the context with W_uv.
void attention_absorbed(const KvSeqView& view, int layer, const MlaCodec& m,
                        const AttentionShape& shape, const float* q, float* out, int query_pos,
                        std::vector<float>& scratch) {
  const int hd = m.head_dim, R = m.rank(), nd = m.nope_dims, rd = m.rope_dims();
  const int group = shape.n_heads / shape.kv_heads;
  const MlaCodecLayer& w = m.layers[static_cast<std::size_t>(layer)];
  // Per query head: q_lat [R], q_rope [rd], ctx [R] (kept apart from the kernel's scratch).
  std::vector<float> q_lat(static_cast<std::size_t>(shape.n_heads) * R, 0.0f);
  std::vector<float> q_rope(static_cast<std::size_t>(shape.n_heads) * std::max(rd, 1), 0.0f);
  std::vector<float> ctx(static_cast<std::size_t>(shape.n_heads) * R);
  std::vector<float> q_pre(static_cast<std::size_t>(hd));  // [head_dim] the query before RoPE
  const Rotation rot(hd, query_pos, m.rope_theta);
  for (int h = 0; h < shape.n_heads; ++h) {
    const int g = h / group;
    const float* qh = q + static_cast<std::size_t>(h) * hd;
    std::memcpy(q_pre.data(), qh, static_cast<std::size_t>(hd) * sizeof(float));
    rot.apply(q_pre.data(), hd, -1.0f);
    float* ql = q_lat.data() + static_cast<std::size_t>(h) * R;
    for (int j = 0; j < nd; ++j) {  // q_lat = W_uk_g^T q_nope
      const float x =
          q_pre[static_cast<std::size_t>(m.nope_index[static_cast<std::size_t>(g) * nd + j])];
      const float* row = w.w_uk.data() + (static_cast<std::size_t>(g) * nd + j) * R;
      for (int r = 0; r < R; ++r) ql[r] += x * row[r];
    }
    for (int j = 0; j < rd; ++j) {
      q_rope[static_cast<std::size_t>(h) * rd + j] =
          qh[m.rope_index[static_cast<std::size_t>(g) * rd + j]];
    }
  }
  LatentAttentionShape s;
  s.n_heads = shape.n_heads;
  s.rank = R;
  s.rope_heads = m.rope_heads();
  s.rope_dim = rd;
  s.score_divisor = std::sqrt(static_cast<float>(hd));
  mla_latent_attention(view, layer, s, q_lat.data(), q_rope.data(), ctx.data(), scratch);
  for (int h = 0; h < shape.n_heads; ++h) {  // out_h = W_uv_g ctx_h
    const std::size_t off = static_cast<std::size_t>(h / group) * hd;
    for (int i = 0; i < hd; ++i) {
      out[static_cast<std::size_t>(h) * hd + i] =
          dot(w.w_uv.data() + (off + i) * R, ctx.data() + static_cast<std::size_t>(h) * R, R);
    }
  }
}

}  // namespace

void mla_kv_write(const KvSeqView& view, int layer, const float* k, const float* v) {
  const MlaCodec& m = checked_codec(view, layer);
  const int hd = m.head_dim, kv_dim = m.kv_heads * hd, nd = m.nope_dims, rd = m.rope_dims();
  const int R = m.rank(), rows = m.key_rows() + kv_dim;
  const MlaCodecLayer& w = m.layers[static_cast<std::size_t>(layer)];
  const int pos = slot_position(view, view.write_slot());
  std::vector<float> k_pre(k, k + kv_dim);  // [kv_dim] the key before RoPE
  const Rotation rot(hd, pos, m.rope_theta);
  for (int g = 0; g < m.kv_heads; ++g)
    rot.apply(k_pre.data() + static_cast<std::size_t>(g) * hd, hd, -1.0f);
  std::vector<float> row(static_cast<std::size_t>(rows));  // [key_rows + kv_dim] = [k_nope; v]
  for (int g = 0; g < m.kv_heads; ++g) {
    for (int j = 0; j < nd; ++j) {
      row[static_cast<std::size_t>(g) * nd + j] =
          k_pre[static_cast<std::size_t>(g) * hd +
                m.nope_index[static_cast<std::size_t>(g) * nd + j]];
    }
  }
  std::memcpy(row.data() + m.key_rows(), v, static_cast<std::size_t>(kv_dim) * sizeof(float));
  std::vector<float> c(static_cast<std::size_t>(R));  // [rank] the latent
  for (int r = 0; r < R; ++r)
    c[static_cast<std::size_t>(r)] =
        dot(w.u_t.data() + static_cast<std::size_t>(r) * rows, row.data(), rows);
  quant::write_token(view, layer, KvKind::kKey, c.data());
  if (m.rope_heads() == 0) return;
  std::vector<float> rope(static_cast<std::size_t>(m.kv_heads) * rd);  // [kv_heads][rope_dims]
  for (int g = 0; g < m.kv_heads; ++g) {
    for (int j = 0; j < rd; ++j) {
      rope[static_cast<std::size_t>(g) * rd + j] =
          k[static_cast<std::size_t>(g) * hd + m.rope_index[static_cast<std::size_t>(g) * rd + j]];
    }
  }
  quant::write_token(view, layer, KvKind::kValue, rope.data());
}

void mla_attention(const KvSeqView& view, int layer, const AttentionShape& shape, const float* q,
                   float* out, int query_pos, AttentionObserver* observer,
                   std::vector<float>& scratch) {
  const MlaCodec& m = checked_codec(view, layer);
  if (shape.n_heads != m.n_heads || shape.kv_heads != m.kv_heads || shape.head_dim != m.head_dim) {
    fail_expected("kv cache: MLA attention shape",
                  std::to_string(m.n_heads) + " heads, " + std::to_string(m.kv_heads) +
                      " KV heads of " + std::to_string(m.head_dim) + " (the converted model)",
                  std::to_string(shape.n_heads) + ", " + std::to_string(shape.kv_heads) + " of " +
                      std::to_string(shape.head_dim));
  }
  if (m.options.mode == MlaMode::kReconstruct)
    attention_reconstruct(view, layer, m, shape, q, out, scratch);
  else
    attention_absorbed(view, layer, m, shape, q, out, query_pos, scratch);
  notify(observer, layer, shape.n_heads, query_pos, view.num_slots, scratch.data());
}

void mla_latent_attention(const KvSeqView& view, int layer, const LatentAttentionShape& s,
                          const float* q_lat, const float* q_rope, float* ctx,
                          std::vector<float>& scratch) {
  const int n = view.num_slots, H = s.n_heads, R = s.rank, D = s.rope_dim;
  const quant::TileReader latents(view, layer, KvKind::kKey);
  std::optional<quant::TileReader> rope_keys;
  if (s.rope_heads > 0) rope_keys.emplace(view, layer, KvKind::kValue);
  const int threads = static_cast<long>(n) * H * (2 * R + D) >= kParallelThreshold
                          ? std::min(omp_get_max_threads(), H)
                          : 1;
  // scratch: weights [H][n], then decode space [threads][R + D], then maxima [H].
  const std::size_t wsz = static_cast<std::size_t>(H) * n;
  const std::size_t need = wsz + static_cast<std::size_t>(threads) * (R + D) + H;
  if (scratch.size() < need) scratch.resize(need);
  float* weights = scratch.data();
  float* max_score = weights + wsz + static_cast<std::size_t>(threads) * (R + D);
  // Each thread owns a range of heads and walks the tokens once per pass, so a latent is decoded
  // once per thread and serves all of its heads (the latent is shared by every head).
#pragma omp parallel num_threads(threads)
  {
    const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
    const int h0 = H * tid / nt, h1 = H * (tid + 1) / nt;
    float* tmp = weights + wsz + static_cast<std::size_t>(tid) * (R + D);
    for (int h = h0; h < h1; ++h) max_score[h] = -INFINITY;
    for (int t = 0; t < n; ++t) {
      if (!is_live(view, t)) {
        for (int h = h0; h < h1; ++h) weights[static_cast<std::size_t>(h) * n + t] = -INFINITY;
        continue;
      }
      const float* c = latents.head(t, 0, tmp);
      int loaded = -1;
      const float* kr = nullptr;
      for (int h = h0; h < h1; ++h) {
        float score = dot(q_lat + static_cast<std::size_t>(h) * R, c, R);
        if (rope_keys) {
          const int rh = h * s.rope_heads / H;
          if (rh != loaded) {
            kr = rope_keys->head(t, rh, tmp + R);
            loaded = rh;
          }
          score += dot(q_rope + static_cast<std::size_t>(h) * D, kr, D);
        }
        score /= s.score_divisor;
        weights[static_cast<std::size_t>(h) * n + t] = score;
        max_score[h] = std::max(max_score[h], score);
      }
    }
    for (int h = h0; h < h1; ++h) {
      softmax_row(weights + static_cast<std::size_t>(h) * n, n, max_score[h]);
      std::memset(ctx + static_cast<std::size_t>(h) * R, 0,
                  static_cast<std::size_t>(R) * sizeof(float));
    }
    for (int t = 0; t < n; ++t) {
      if (!is_live(view, t)) continue;
      const float* c = latents.head(t, 0, tmp);
      for (int h = h0; h < h1; ++h) {
        const float a = weights[static_cast<std::size_t>(h) * n + t];
        if (a == 0.0f) continue;
        float* ch = ctx + static_cast<std::size_t>(h) * R;
#pragma omp simd
        for (int r = 0; r < R; ++r) ch[r] += a * c[r];
      }
    }
  }
}

}  // namespace kvscope::cpu

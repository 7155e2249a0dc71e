// The MLA latent cache on the device (engine/mla/mla_codec.h): what a token's K/V becomes before
// its latent is projected, mode A's rebuild of every slot's K and V from its latent, and mode B's
// absorbed attention (DeepSeek style), which never rebuilds a token's K or V. The projections
// that are plain products (the latent c = U^T [k_nope; v], mode A's K = W_uk c and V = W_uv c,
// mode B's out_h = W_uv_g ctx_h) go through cuBLAS; these kernels do the rest. CPU twins:
// cpu::mla_kv_write and cpu::mla_attention (engine/backend/cpu/mla_ops.cpp).
//
//   mla_latent_input_kernel   k (post-RoPE) and v -> [k_nope pre-RoPE; v] and mode B's RoPE keys
//   kv_gather_kernel          a sequence's rows of any per-token format, decoded to fp32 [n][dim]
//   mla_absorb_query_kernel   mode B: q_lat = W_uk_g^T q_nope (pre-RoPE), q_rope = q's rotary dims
//   mla_latent_attention_kernel  mode B: softmax((q_lat . c_t + q_rope . k_rope_t) / divisor),
//                                ctx = sum_t a_t c_t; one block per query head, one pass
//   mla_latent_split_kernel      the same over one chunk of slots (split-K past 4,096 slots),
//                                combined by paged_attention.cuh's reduce kernel
#pragma once

#include "kernels/common/kv_formats.cuh"
#include "kernels/common/reduce.cuh"
#include "kernels/ops/paged_attention.cuh"
#include "kernels/ops/rope.cuh"

KVS_KERNELS_BEGIN

// Element `dim` (0..head_dim) of one KV head's key k_head (post-RoPE at pos), rotated back to
// before RoPE (the pair it belongs to, rotated by -pos).
KVS_DEVICE float key_before_rope(const float* k_head, int dim, int pos, int head_dim, float theta) {
  const int first = dim - dim % 2;
  float pair[2] = {k_head[first], k_head[first + 1]};
  rope_pair(pair, first, -pos, head_dim, theta);
  return dim % 2 == 0 ? pair[0] : pair[1];
}

// One block: row [kv_heads * nope_dims + kv_heads * head_dim] = [k_nope before RoPE; v] and, when
// rope_dims > 0, rope [kv_heads][rope_dims] = k's rotary dims as they came (post-RoPE).
// nope_index [kv_heads][nope_dims] and rope_index [kv_heads][rope_dims] are head-dim indices.
KVS_GLOBAL void mla_latent_input_kernel(float* row, float* rope, const float* k, const float* v,
                                        const int* nope_index, const int* rope_index, int kv_heads,
                                        int head_dim, int nope_dims, int rope_dims, int pos,
                                        float theta) {
  const int tid = static_cast<int>(simt::tid_x()), nt = static_cast<int>(simt::bdim_x());
  const int key_rows = kv_heads * nope_dims, kv_dim = kv_heads * head_dim;
  for (int i = tid; i < key_rows; i += nt) {
    const int g = i / nope_dims;
    row[i] =
        key_before_rope(k + static_cast<long>(g) * head_dim, nope_index[i], pos, head_dim, theta);
  }
  for (int i = tid; i < kv_dim; i += nt) row[key_rows + i] = v[i];
  for (int i = tid; i < kv_heads * rope_dims; i += nt)
    rope[i] = k[static_cast<long>(i / rope_dims) * head_dim + rope_index[i]];
}

// Block t: slot t's row (kv_heads x head_dim values) of the tiles, through the block table,
// decoded to fp32 into out[t].
KVS_GLOBAL void kv_gather_kernel(float* out, KvTiles tiles, const int* block_table, int kv_heads,
                                 int head_dim, int block_size) {
  const int t = static_cast<int>(simt::bid_x());
  const int block = block_table[t / block_size], offset = t % block_size;
  const int kv_dim = kv_heads * head_dim;
  for (int e = static_cast<int>(simt::tid_x()); e < kv_dim; e += static_cast<int>(simt::bdim_x())) {
    out[static_cast<long>(t) * kv_dim + e] =
        kv_load(tiles, block, offset, e, e / head_dim, kv_dim, kv_heads, block_size);
  }
}

// Block h (query head, KV head g = h / (n_heads / kv_heads)): q_lat[h][r] = sum_j x_j
// W_uk[g * nope_dims + j][r] with x the head's nope dims before RoPE (at pos), and q_rope[h] the
// head's rotary dims as they came. Dynamic shared memory: nope_dims floats.
KVS_GLOBAL void mla_absorb_query_kernel(float* q_lat, float* q_rope, const float* q,
                                        const float* w_uk, const int* nope_index,
                                        const int* rope_index, int n_heads, int kv_heads,
                                        int head_dim, int nope_dims, int rope_dims, int rank,
                                        int pos, float theta) {
  KVS_DYNAMIC_SHARED(float, x);  // [nope_dims]
  const int h = static_cast<int>(simt::bid_x()), g = h / (n_heads / kv_heads);
  const int tid = static_cast<int>(simt::tid_x()), nt = static_cast<int>(simt::bdim_x());
  const float* qh = q + static_cast<long>(h) * head_dim;
  for (int j = tid; j < nope_dims; j += nt)
    x[j] = key_before_rope(qh, nope_index[g * nope_dims + j], pos, head_dim, theta);
  for (int j = tid; j < rope_dims; j += nt)
    q_rope[static_cast<long>(h) * rope_dims + j] = qh[rope_index[g * rope_dims + j]];
  simt::sync_block();  // x is complete
  const float* w = w_uk + static_cast<long>(g) * nope_dims * rank;
  for (int r = tid; r < rank; r += nt) {
    float acc = 0.0f;
    for (int j = 0; j < nope_dims; ++j) acc += x[j] * w[static_cast<long>(j) * rank + r];
    q_lat[static_cast<long>(h) * rank + r] = acc;
  }
}

// A sequence's latent rows and RoPE keys, as mode B's attention reads them.
struct LatentKv {
  KvTiles latents;  // the layer's K-region tiles: [block_size][rank] per tile
  KvTiles rope;     // the layer's V-region tiles: [block_size][rope_heads][rope_dim]
  const int* block_table = nullptr;
  int num_slots = 0;
  int block_size = 0;
  int rank = 0;
  int rope_heads = 0;  // 0: no RoPE keys; query head h reads h * rope_heads / n_heads
  int rope_dim = 0;
  const unsigned char* live = nullptr;  // [num_slots] 0 = evicted; nullptr: every slot is live
};

// Head h's scores over slots [t0, t1) (in `scores`, shared memory, t1 - t0 floats):
// exp((q_lat . c_t + q_rope . k_rope_t) / divisor - m) for the range's own maximum m; returns m
// and, through *sum, the scores' sum. Evicted slots score 0; a range with no live slot returns
// -inf with a sum of 0. Ends with the scores published to the whole block.
KVS_DEVICE float latent_range(const float* ql, const float* qr, const LatentKv& kv, int rh, int t0,
                              int t1, float score_divisor, float* scores, float* slots,
                              float* sum) {
  const int tid = static_cast<int>(simt::tid_x()), nt = static_cast<int>(simt::bdim_x());
  const int R = kv.rank, D = kv.rope_dim;
  float local_max = -INFINITY;
  for (int t = t0 + tid; t < t1; t += nt) {
    if (kv.live != nullptr && kv.live[t] == 0) {
      scores[t - t0] = -INFINITY;
      continue;
    }
    const int block = kv.block_table[t / kv.block_size], offset = t % kv.block_size;
    float s = 0.0f;
    for (int r = 0; r < R; ++r)
      s += ql[r] * kv_load(kv.latents, block, offset, r, 0, R, 1, kv.block_size);
    if (kv.rope_heads > 0) {
      const int dim = kv.rope_heads * D;
      float sr = 0.0f;
      for (int j = 0; j < D; ++j) {
        sr += qr[j] *
              kv_load(kv.rope, block, offset, rh * D + j, rh, dim, kv.rope_heads, kv.block_size);
      }
      s += sr;
    }
    s /= score_divisor;
    scores[t - t0] = s;
    local_max = fmaxf(local_max, s);
  }
  const float max_score = block_max(local_max, slots);
  float local_sum = 0.0f;
  for (int t = t0 + tid; t < t1; t += nt) {
    const float e = scores[t - t0] == -INFINITY ? 0.0f : expf(scores[t - t0] - max_score);
    scores[t - t0] = e;
    local_sum += e;
  }
  *sum = block_sum(local_sum, slots);  // its barriers also publish scores[]
  return max_score;
}

// sum_t scores[t - t0] c_t[r] over [t0, t1), for the latent dim r.
KVS_DEVICE float latent_weigh(const LatentKv& kv, int t0, int t1, const float* scores, int r) {
  float acc = 0.0f;
  for (int t = t0; t < t1; ++t) {
    if (scores[t - t0] == 0.0f) continue;
    const int block = kv.block_table[t / kv.block_size], offset = t % kv.block_size;
    acc += scores[t - t0] * kv_load(kv.latents, block, offset, r, 0, kv.rank, 1, kv.block_size);
  }
  return acc;
}

// Block h: head h's scores over the slots (in dynamic shared memory, num_slots floats), its
// softmax row (into weights[h][num_slots] when capturing) and ctx[h][r] = sum_t a_t c_t[r].
KVS_GLOBAL void mla_latent_attention_kernel(float* ctx, float* weights, const float* q_lat,
                                            const float* q_rope, LatentKv kv, int n_heads,
                                            float score_divisor) {
  KVS_SHARED_ARRAY(float, slots, 32);
  KVS_DYNAMIC_SHARED(float, scores);  // [num_slots]
  const int h = static_cast<int>(simt::bid_x());
  const int tid = static_cast<int>(simt::tid_x()), nt = static_cast<int>(simt::bdim_x());
  const int n = kv.num_slots, R = kv.rank;
  const int rh = kv.rope_heads > 0 ? h * kv.rope_heads / n_heads : 0;
  float sum = 0.0f;
  latent_range(q_lat + static_cast<long>(h) * R, q_rope + static_cast<long>(h) * kv.rope_dim, kv,
               rh, 0, n, score_divisor, scores, slots, &sum);
  for (int t = tid; t < n; t += nt) {
    scores[t] /= sum;
    if (weights != nullptr) weights[static_cast<long>(h) * n + t] = scores[t];
  }
  simt::sync_block();  // every normalized weight is in place
  for (int r = tid; r < R; r += nt)
    ctx[static_cast<long>(h) * R + r] = latent_weigh(kv, 0, n, scores, r);
}

// Split-K for long contexts: block (h, s) runs head h over slots [s * chunk, (s + 1) * chunk)
// with its own maximum and writes its unnormalized context part[h][s][rank], maximum m[h][s] and
// sum l[h][s] (and, when capturing, its unnormalized weights); paged_attention_reduce_kernel
// (paged_attention.cuh, with head_dim = rank) rescales and combines them.
KVS_GLOBAL void mla_latent_split_kernel(float* part, float* m, float* l, const float* q_lat,
                                        const float* q_rope, LatentKv kv, int n_heads,
                                        float score_divisor, int chunk, float* weights) {
  KVS_SHARED_ARRAY(float, slots, 32);
  KVS_DYNAMIC_SHARED(float, scores);  // [chunk]
  const int h = static_cast<int>(simt::bid_x()), s = static_cast<int>(simt::bid_y());
  const int splits = static_cast<int>(simt::gdim_y());
  const int tid = static_cast<int>(simt::tid_x()), nt = static_cast<int>(simt::bdim_x());
  const int R = kv.rank;
  const int rh = kv.rope_heads > 0 ? h * kv.rope_heads / n_heads : 0;
  const int t0 = s * chunk, t1 = t0 + chunk < kv.num_slots ? t0 + chunk : kv.num_slots;
  float sum = 0.0f;
  const float max_score =
      latent_range(q_lat + static_cast<long>(h) * R, q_rope + static_cast<long>(h) * kv.rope_dim,
                   kv, rh, t0, t1, score_divisor, scores, slots, &sum);
  const long hs = static_cast<long>(h) * splits + s;
  if (weights != nullptr) {
    for (int t = t0 + tid; t < t1; t += nt)
      weights[static_cast<long>(h) * kv.num_slots + t] = scores[t - t0];
  }
  for (int r = tid; r < R; r += nt) part[hs * R + r] = latent_weigh(kv, t0, t1, scores, r);
  if (tid == 0) {
    m[hs] = max_score;
    l[hs] = sum;
  }
}

inline void launch_mla_latent_input(float* row, float* rope, const float* k, const float* v,
                                    const int* nope_index, const int* rope_index, int kv_heads,
                                    int head_dim, int nope_dims, int rope_dims, int pos,
                                    float theta) {
  KVS_LAUNCH(mla_latent_input_kernel, simt::Dim3(1), simt::Dim3(128), 0, row, rope, k, v,
             nope_index, rope_index, kv_heads, head_dim, nope_dims, rope_dims, pos, theta);
}

inline void launch_kv_gather(float* out, const KvTiles& tiles, const int* block_table, int n,
                             int kv_heads, int head_dim, int block_size) {
  KVS_LAUNCH(kv_gather_kernel, simt::Dim3(static_cast<unsigned>(n)), simt::Dim3(64), 0, out, tiles,
             block_table, kv_heads, head_dim, block_size);
}

inline void launch_mla_absorb_query(float* q_lat, float* q_rope, const float* q, const float* w_uk,
                                    const int* nope_index, const int* rope_index, int n_heads,
                                    int kv_heads, int head_dim, int nope_dims, int rope_dims,
                                    int rank, int pos, float theta) {
  KVS_LAUNCH(mla_absorb_query_kernel, simt::Dim3(static_cast<unsigned>(n_heads)), simt::Dim3(64),
             static_cast<std::size_t>(nope_dims > 0 ? nope_dims : 1) * sizeof(float), q_lat, q_rope,
             q, w_uk, nope_index, rope_index, n_heads, kv_heads, head_dim, nope_dims, rope_dims,
             rank, pos, theta);
}

// Slots mode B's one-pass kernel takes (its scores in shared memory), as paged attention's;
// longer contexts split into chunks of kLatentSplitChunk.
constexpr int kLatentOnePassSlots = 4096;
constexpr int kLatentSplitChunk = 2048;

inline void launch_mla_latent_attention(float* ctx, float* weights, const float* q_lat,
                                        const float* q_rope, const LatentKv& kv, int n_heads,
                                        float score_divisor) {
  KVS_LAUNCH(mla_latent_attention_kernel, simt::Dim3(static_cast<unsigned>(n_heads)),
             simt::Dim3(128), static_cast<std::size_t>(kv.num_slots) * sizeof(float), ctx, weights,
             q_lat, q_rope, kv, n_heads, score_divisor);
}

// Split-K over any number of slots: `work` holds split_workspace_floats(n_heads, kv.rank,
// kv.num_slots, chunk) floats (paged_attention.cuh, the rank as the row width).
inline void launch_mla_latent_attention_split(float* ctx, float* weights, const float* q_lat,
                                              const float* q_rope, const LatentKv& kv, int n_heads,
                                              float score_divisor, int chunk, float* work) {
  const int splits = (kv.num_slots + chunk - 1) / chunk;
  const auto [part, m, l] = split_parts(work, n_heads, splits, kv.rank);
  KVS_LAUNCH(mla_latent_split_kernel,
             simt::Dim3(static_cast<unsigned>(n_heads), static_cast<unsigned>(splits)),
             simt::Dim3(128), static_cast<std::size_t>(chunk) * sizeof(float), part, m, l, q_lat,
             q_rope, kv, n_heads, score_divisor, chunk, weights);
  KVS_LAUNCH(paged_attention_reduce_kernel, simt::Dim3(static_cast<unsigned>(n_heads)),
             simt::Dim3(128), 0, ctx, part, m, l, splits, kv.rank, kv.num_slots, chunk, weights);
}

KVS_KERNELS_END

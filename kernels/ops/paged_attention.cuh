// Paged decode attention: one query token, one block per query head, over a pool in any
// per-token format (fp32, fp16, bf16, int8, FP8; dequantized as it is read).
// out[h] = softmax(q[h] . K^T / sqrt(head_dim)) V over the sequence's num_slots slots, where slot
// t lives in logical block t / block_size of the block table, row t % block_size. GQA: query
// head h reads KV head h / (n_heads / kv_heads). With `weights` set, the softmax row of head h
// is also written to weights[h * num_slots ...] (attention capture: heatmaps, sink shares).
//
// Pool layout (engine/kv/kv_storage.h, kernels/common/kv_formats.cuh): for one layer, the tile of
// physical block b starts at base + b * tile_bytes.
//
// One pass with the scores in dynamic shared memory (num_slots floats: up to 12,248 slots in the
// 48 KiB a launch gets); contexts beyond that need the split-K variant, not written yet.
// CPU twin: cpu::paged_attention.
#pragma once

#include "kernels/common/kv_formats.cuh"
#include "kernels/common/reduce.cuh"

KVS_KERNELS_BEGIN

struct PagedKv {
  KvTiles k;  // the layer's K tiles
  KvTiles v;  // the layer's V tiles
  const int* block_table = nullptr;
  int num_slots = 0;
  int block_size = 0;
  int kv_heads = 0;
  int head_dim = 0;
};

KVS_GLOBAL void paged_attention_kernel(float* out, const float* q, PagedKv kv, int n_heads,
                                       float* weights) {
  KVS_SHARED_ARRAY(float, slots, 32);
  KVS_DYNAMIC_SHARED(float, scores);
  const int h = static_cast<int>(simt::bid_x());
  const int g = h / (n_heads / kv.kv_heads);
  const int kv_dim = kv.kv_heads * kv.head_dim, e0 = g * kv.head_dim;
  const float* qh = q + static_cast<long>(h) * kv.head_dim;
  const float inv_sqrt = 1.0f / sqrtf(static_cast<float>(kv.head_dim));
  const int tid = static_cast<int>(simt::tid_x()), nt = static_cast<int>(simt::bdim_x());
  float local_max = -INFINITY;
  for (int t = tid; t < kv.num_slots; t += nt) {
    const int block = kv.block_table[t / kv.block_size], offset = t % kv.block_size;
    float s = 0.0f;
    if (kv.k.code == kKvF32) {  // no decoding: the fp32 pool's rows as they are
      const float* kt = reinterpret_cast<const float*>(kv.k.base + block * kv.k.tile_bytes) +
                        static_cast<long>(offset) * kv_dim + e0;
      for (int d = 0; d < kv.head_dim; ++d) s += qh[d] * kt[d];
    } else {
      for (int d = 0; d < kv.head_dim; ++d)
        s += qh[d] * kv_load(kv.k, block, offset, e0 + d, g, kv_dim, kv.kv_heads, kv.block_size);
    }
    s *= inv_sqrt;
    scores[t] = s;
    local_max = fmaxf(local_max, s);
  }
  const float max_score = block_max(local_max, slots);
  float local_sum = 0.0f;
  for (int t = tid; t < kv.num_slots; t += nt) {
    const float e = expf(scores[t] - max_score);
    scores[t] = e;
    local_sum += e;
  }
  const float sum = block_sum(local_sum, slots);  // its barriers also publish scores[]
  if (weights != nullptr) {
    for (int t = tid; t < kv.num_slots; t += nt)
      weights[static_cast<long>(h) * kv.num_slots + t] = scores[t] / sum;
  }
  for (int d = tid; d < kv.head_dim; d += nt) {
    float acc = 0.0f;
    for (int t = 0; t < kv.num_slots; ++t) {
      const int block = kv.block_table[t / kv.block_size], offset = t % kv.block_size;
      acc += scores[t] *
             (kv.v.code == kKvF32
                  ? reinterpret_cast<const float*>(
                        kv.v.base +
                        block * kv.v.tile_bytes)[static_cast<long>(offset) * kv_dim + e0 + d]
                  : kv_load(kv.v, block, offset, e0 + d, g, kv_dim, kv.kv_heads, kv.block_size));
    }
    out[static_cast<long>(h) * kv.head_dim + d] = acc / sum;
  }
}

inline void launch_paged_attention(float* out, const float* q, const PagedKv& kv, int n_heads,
                                   unsigned threads = 128, float* weights = nullptr) {
  KVS_LAUNCH(paged_attention_kernel, simt::Dim3(static_cast<unsigned>(n_heads)),
             simt::Dim3(threads), static_cast<std::size_t>(kv.num_slots) * sizeof(float), out, q,
             kv, n_heads, weights);
}

KVS_KERNELS_END

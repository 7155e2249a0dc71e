// Paged decode attention over an fp32 KV pool: one query token, one block per query head.
// out[h] = softmax(q[h] . K^T / sqrt(head_dim)) V over the sequence's num_slots slots, where slot
// t lives in logical block t / block_size of the block table, row t % block_size. GQA: query
// head h reads KV head h / (n_heads / kv_heads).
//
// Pool layout (engine/kv/kv_storage.h): for one layer, the tile of physical block b starts at
// base + b * tile_floats and holds [block_size][kv_heads][head_dim] floats.
//
// One pass with the scores in dynamic shared memory (num_slots floats: up to 12,288 slots in the
// 48 KiB a launch gets); contexts beyond that need the split-K variant, not written yet.
// CPU twin: cpu::paged_attention on an fp32 pool.
#pragma once

#include "kernels/common/reduce.cuh"

KVS_KERNELS_BEGIN

struct PagedKv {
  const float* k = nullptr;  // the layer's K tiles
  const float* v = nullptr;  // the layer's V tiles
  long tile_floats = 0;      // floats per tile (block_size * kv_heads * head_dim)
  const int* block_table = nullptr;
  int num_slots = 0;
  int block_size = 0;
  int kv_heads = 0;
  int head_dim = 0;
};

KVS_DEVICE const float* slot_row(const PagedKv& kv, const float* base, int t, int kv_head) {
  const int block = kv.block_table[t / kv.block_size];
  return base + static_cast<long>(block) * kv.tile_floats +
         (static_cast<long>(t % kv.block_size) * kv.kv_heads + kv_head) * kv.head_dim;
}

KVS_GLOBAL void paged_attention_kernel(float* out, const float* q, PagedKv kv, int n_heads) {
  KVS_SHARED_ARRAY(float, slots, 32);
  KVS_DYNAMIC_SHARED(float, scores);
  const int h = static_cast<int>(simt::bid_x());
  const int g = h / (n_heads / kv.kv_heads);
  const float* qh = q + static_cast<long>(h) * kv.head_dim;
  const float inv_sqrt = 1.0f / sqrtf(static_cast<float>(kv.head_dim));
  const int tid = static_cast<int>(simt::tid_x()), nt = static_cast<int>(simt::bdim_x());
  float local_max = -INFINITY;
  for (int t = tid; t < kv.num_slots; t += nt) {
    const float* kt = slot_row(kv, kv.k, t, g);
    float s = 0.0f;
    for (int d = 0; d < kv.head_dim; ++d) s += qh[d] * kt[d];
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
  for (int d = tid; d < kv.head_dim; d += nt) {
    float acc = 0.0f;
    for (int t = 0; t < kv.num_slots; ++t) acc += scores[t] * slot_row(kv, kv.v, t, g)[d];
    out[static_cast<long>(h) * kv.head_dim + d] = acc / sum;
  }
}

inline void launch_paged_attention(float* out, const float* q, const PagedKv& kv, int n_heads,
                                   unsigned threads = 128) {
  KVS_LAUNCH(paged_attention_kernel, simt::Dim3(static_cast<unsigned>(n_heads)),
             simt::Dim3(threads), static_cast<std::size_t>(kv.num_slots) * sizeof(float), out, q,
             kv, n_heads);
}

KVS_KERNELS_END

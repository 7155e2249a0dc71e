// Paged decode attention: one query token, one block per query head, over a pool in any
// per-token format (fp32, fp16, bf16, int8, FP8, int4, int2; dequantized as it is read).
// out[h] = softmax(q[h] . K^T / sqrt(head_dim)) V over the sequence's num_slots slots, where slot
// t lives in logical block t / block_size of the block table, row t % block_size. GQA: query
// head h reads KV head h / (n_heads / kv_heads). With `weights` set, the softmax row of head h
// is also written to weights[h * num_slots ...] (attention capture: heatmaps, sink shares).
// Token eviction: with `live` set, a slot whose live[t] is 0 holds an evicted token; it gets
// weight 0 and its V is not read (the CPU's -inf score), whatever its bytes.
// KIVI: a sequence's open group (slots from open_k_start / open_v_start on) is read from its
// full-precision staging rows [residual][kv_dim] instead of the tiles, as the CPU reads it.
//
// Pool layout (engine/kv/kv_storage.h, kernels/common/kv_formats.cuh): for one layer, the tile of
// physical block b starts at base + b * tile_bytes.
//
// Short contexts run in one pass, the scores in dynamic shared memory; long ones split along
// the sequence (split-K, as flash-decoding does) and a second kernel combines the splits. The
// batch kernel runs every query of an engine step in one launch (decode tokens of many
// sequences, a prefill chunk's causal queries).
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
  const unsigned char* live = nullptr;  // [num_slots] 0 = evicted; nullptr: every slot is live
  // KIVI's open groups: K (V) slots from open_k_start (open_v_start) on are rows of open_k
  // (open_v) [residual][kv_dim]; nullptr when the kind has none.
  const float* open_k = nullptr;
  const float* open_v = nullptr;
  int open_k_start = 0;
  int open_v_start = 0;
};

KVS_DEVICE bool slot_is_live(const PagedKv& kv, int t) {
  return kv.live == nullptr || kv.live[t] != 0;
}

// For the memory trace: what this thread block works on (query `query` of the launch, KV head g,
// split s over slots [t0, t1), query heads [h0, h0 + heads)), declared by its thread 0.
KVS_DEVICE void trace_block_role(const PagedKv& kv, int query, int g, int s, int h0, int heads,
                                 int t0, int t1) {
  if (simt::tid_x() == 0)
    simt::trace_role(query, g, s, h0, heads, t0, t1, kv.block_table, kv.num_slots, kv.block_size);
}

// Slot t's K (or V) value d of KV head g: from the open group's staging rows `open` (nullptr:
// none) when t >= open_start, else through the block table. what and key: the memory trace's
// (kv_load); the block table entry is traced by the callers, once per slot.
KVS_DEVICE float kv_at(const PagedKv& kv, const KvTiles& tiles, const float* open, int open_start,
                       int t, int g, int d, unsigned what, std::uint64_t key) {
  const int kv_dim = kv.kv_heads * kv.head_dim, e = g * kv.head_dim + d;
  if (open != nullptr && t >= open_start) {
    const float* row = open + static_cast<long>(t - open_start) * kv_dim + e;
    simt::trace_load(row, 4, simt::kTraceStaging, -1, key);
    return *row;
  }
  const int block = kv.block_table[t / kv.block_size], offset = t % kv.block_size;
  if (tiles.code == kKvF32) {  // no decoding: the fp32 pool's rows as they are
    const float* p = reinterpret_cast<const float*>(tiles.base + block * tiles.tile_bytes) +
                     static_cast<long>(offset) * kv_dim + e;
    simt::trace_load(p, 4, what, block, key);
    return *p;
  }
  return kv_load(tiles, block, offset, e, g, kv_dim, kv.kv_heads, kv.block_size, what, key);
}

// The memory trace's record of slot t's block table entry (slots in the open group have none).
KVS_DEVICE void trace_table_entry(const PagedKv& kv, const float* open, int open_start, int t,
                                  std::uint64_t key) {
  if (open == nullptr || t < open_start) {
    const int* entry = kv.block_table + t / kv.block_size;
    simt::trace_load(entry, 4, simt::kTraceTable, -1, key);
  }
}

// The part of one query head's attention over slots [t0, t1) that one block computes:
// scores[i] = exp(q . k_{t0+i} / sqrt(d) - m) for the range's own maximum m; returns m and,
// through *sum, the scores' sum. Evicted slots score 0; a range with no live slot returns -inf
// with a sum of 0. Ends with the scores published to the whole block.
KVS_DEVICE float attend_range(const float* qh, const PagedKv& kv, int g, int t0, int t1,
                              float* scores, float* slots, float* sum) {
  const float inv_sqrt = 1.0f / sqrtf(static_cast<float>(kv.head_dim));
  const int tid = static_cast<int>(simt::tid_x()), nt = static_cast<int>(simt::bdim_x());
  float local_max = -INFINITY;
  for (int t = t0 + tid; t < t1; t += nt) {
    if (!slot_is_live(kv, t)) {
      scores[t - t0] = -INFINITY;
      continue;
    }
    const long iter = (t - t0) / nt;  // the loop's iteration, the same for every lane
    trace_table_entry(kv, kv.open_k, kv.open_k_start, t, simt::trace_key(1, iter, 0));
    float s = 0.0f;
    for (int d = 0; d < kv.head_dim; ++d)
      s += qh[d] * kv_at(kv, kv.k, kv.open_k, kv.open_k_start, t, g, d, simt::kTraceKCodes,
                         simt::trace_key(1, iter, 1 + d));
    s *= inv_sqrt;
    scores[t - t0] = s;
    local_max = fmaxf(local_max, s);
  }
  const float max_score = block_max(local_max, slots);
  float local_sum = 0.0f;
  for (int t = t0 + tid; t < t1; t += nt) {
    const float e = slot_is_live(kv, t) ? expf(scores[t - t0] - max_score) : 0.0f;
    scores[t - t0] = e;
    local_sum += e;
  }
  *sum = block_sum(local_sum, slots);  // its barriers also publish scores[]
  return max_score;
}

// acc[d] = sum_i scores[i] * v_{t0+i}[d], for the d this thread owns (d = tid, tid + nt, ...).
KVS_DEVICE float weigh_values(const PagedKv& kv, int g, int t0, int t1, const float* scores,
                              int d) {
  float acc = 0.0f;
  const long pass = d / static_cast<long>(simt::bdim_x());  // the caller's loop over d
  for (int t = t0; t < t1; ++t) {
    if (!slot_is_live(kv, t)) continue;
    const long iter = pass * kv.num_slots + t;
    trace_table_entry(kv, kv.open_v, kv.open_v_start, t, simt::trace_key(2, iter, 0));
    acc += scores[t - t0] * kv_at(kv, kv.v, kv.open_v, kv.open_v_start, t, g, d, simt::kTraceVCodes,
                                  simt::trace_key(2, iter, 1));
  }
  return acc;
}

// Head h of one query over all of kv's slots, by one block: out_h [head_dim], and, when w_row is
// set, the softmax row [num_slots]. scores: num_slots floats of shared memory.
KVS_DEVICE void attend_all(float* out_h, const float* qh, const PagedKv& kv, int g, float* w_row,
                           float* scores, float* slots) {
  const int tid = static_cast<int>(simt::tid_x()), nt = static_cast<int>(simt::bdim_x());
  float sum = 0.0f;
  attend_range(qh, kv, g, 0, kv.num_slots, scores, slots, &sum);
  if (w_row != nullptr) {
    for (int t = tid; t < kv.num_slots; t += nt) w_row[t] = scores[t] / sum;
  }
  for (int d = tid; d < kv.head_dim; d += nt)
    out_h[d] = weigh_values(kv, g, 0, kv.num_slots, scores, d) / sum;
}

// One pass: one block per query head over all its slots (at most kOnePassSlots).
KVS_GLOBAL void paged_attention_kernel(float* out, const float* q, PagedKv kv, int n_heads,
                                       float* weights) {
  KVS_SHARED_ARRAY(float, slots, 32);
  KVS_DYNAMIC_SHARED(float, scores);
  const int h = static_cast<int>(simt::bid_x());
  trace_block_role(kv, 0, h / (n_heads / kv.kv_heads), 0, h, 1, 0, kv.num_slots);
  attend_all(out + static_cast<long>(h) * kv.head_dim, q + static_cast<long>(h) * kv.head_dim, kv,
             h / (n_heads / kv.kv_heads),
             weights != nullptr ? weights + static_cast<long>(h) * kv.num_slots : nullptr, scores,
             slots);
}

// The queries of a whole engine step in one launch: decode tokens of many sequences and the
// causal prefill of a chunk (its i-th query sees the slots up to its own, which the step wrote
// before attending), each over its own sequence of one pool. Per query i, meta[kBatchMeta i ..] =
// {offset of its block table in `tables`, its num_slots, offset of its live map in `live` or -1,
// offset of its captured rows [n_heads][num_slots] in `weights` or -1, KIVI: first slot of its
// open K group, offset of that group's rows in `staging` or -1, the same two for V}.
constexpr int kBatchMeta = 8;
struct PagedBatch {
  KvTiles k, v;
  int block_size = 0;
  int kv_heads = 0;
  int head_dim = 0;
  const int* tables = nullptr;
  const int* meta = nullptr;
  const unsigned char* live = nullptr;
  const float* staging = nullptr;  // KIVI open groups' rows
};

// The query of meta row i as the batch kernels read it.
KVS_DEVICE PagedKv batch_query(const PagedBatch& b, int i) {
  const int* mi = b.meta + kBatchMeta * i;
  PagedKv kv;
  kv.k = b.k;
  kv.v = b.v;
  kv.block_table = b.tables + mi[0];
  kv.num_slots = mi[1];
  kv.block_size = b.block_size;
  kv.kv_heads = b.kv_heads;
  kv.head_dim = b.head_dim;
  kv.live = mi[2] >= 0 ? b.live + mi[2] : nullptr;
  kv.open_k_start = mi[4];
  kv.open_k = mi[5] >= 0 ? b.staging + mi[5] : nullptr;
  kv.open_v_start = mi[6];
  kv.open_v = mi[7] >= 0 ? b.staging + mi[7] : nullptr;
  return kv;
}

// Block (h, i): head h of query i, as the one-pass kernel (every num_slots <= kOnePassSlots).
KVS_GLOBAL void paged_attention_batch_kernel(float* out, const float* q, PagedBatch b, int n_heads,
                                             float* weights) {
  KVS_SHARED_ARRAY(float, slots, 32);
  KVS_DYNAMIC_SHARED(float, scores);
  const int h = static_cast<int>(simt::bid_x()), i = static_cast<int>(simt::bid_y());
  const int* m = b.meta + kBatchMeta * i;
  const PagedKv kv = batch_query(b, i);
  trace_block_role(kv, i, h / (n_heads / b.kv_heads), 0, h, 1, 0, kv.num_slots);
  const long row = (static_cast<long>(i) * n_heads + h) * b.head_dim;
  float* w_row = m[3] >= 0 ? weights + m[3] + static_cast<long>(h) * kv.num_slots : nullptr;
  attend_all(out + row, q + row, kv, h / (n_heads / b.kv_heads), w_row, scores, slots);
}

// Split-K for long contexts (flash-decoding): block (h, s) attends over slots [s * chunk,
// (s + 1) * chunk) with its own maximum and writes the unnormalized partial output
// part[h][s][head_dim], its maximum m[h][s] and sum l[h][s] (and, when capturing, its
// unnormalized weights); paged_attention_reduce_kernel then rescales and combines them.
KVS_GLOBAL void paged_attention_split_kernel(float* part, float* m, float* l, const float* q,
                                             PagedKv kv, int n_heads, int chunk, float* weights) {
  KVS_SHARED_ARRAY(float, slots, 32);
  KVS_DYNAMIC_SHARED(float, scores);
  const int h = static_cast<int>(simt::bid_x()), s = static_cast<int>(simt::bid_y());
  const int splits = static_cast<int>(simt::gdim_y());
  const int g = h / (n_heads / kv.kv_heads);
  const int t0 = s * chunk, t1 = t0 + chunk < kv.num_slots ? t0 + chunk : kv.num_slots;
  trace_block_role(kv, 0, g, s, h, 1, t0, t1);
  const float* qh = q + static_cast<long>(h) * kv.head_dim;
  const int tid = static_cast<int>(simt::tid_x()), nt = static_cast<int>(simt::bdim_x());
  float sum = 0.0f;
  const float max_score = attend_range(qh, kv, g, t0, t1, scores, slots, &sum);
  const long hs = static_cast<long>(h) * splits + s;
  if (weights != nullptr) {
    for (int t = t0 + tid; t < t1; t += nt)
      weights[static_cast<long>(h) * kv.num_slots + t] = scores[t - t0];
  }
  for (int d = tid; d < kv.head_dim; d += nt)
    part[hs * kv.head_dim + d] = weigh_values(kv, g, t0, t1, scores, d);
  if (tid == 0) {
    m[hs] = max_score;
    l[hs] = sum;
  }
}

// One head's splits combined: out_h = sum_s part[s] e^(m_s - M) / sum_s l[s] e^(m_s - M), M the
// largest m_s, over the first `splits` splits (part [splits][width], m and l [splits]); the
// captured row w_row [num_slots] (nullptr: none) of split s is scaled by e^(m_s - M) / L the same
// way. A split with no live slot (m_s = -inf) contributes nothing. Run by every thread of the
// block.
KVS_DEVICE void combine_splits(float* out_h, const float* part, const float* m, const float* l,
                               int splits, int width, int num_slots, int chunk, float* w_row) {
  const int tid = static_cast<int>(simt::tid_x()), nt = static_cast<int>(simt::bdim_x());
  float big = -INFINITY;
  for (int s = 0; s < splits; ++s) big = fmaxf(big, m[s]);
  const auto rescale = [&](int s) { return m[s] == -INFINITY ? 0.0f : expf(m[s] - big); };
  float total = 0.0f;
  for (int s = 0; s < splits; ++s) total += l[s] * rescale(s);
  for (int d = tid; d < width; d += nt) {
    float acc = 0.0f;
    for (int s = 0; s < splits; ++s) acc += part[static_cast<long>(s) * width + d] * rescale(s);
    out_h[d] = acc / total;
  }
  if (w_row != nullptr) {
    for (int t = tid; t < num_slots; t += nt) w_row[t] = w_row[t] * rescale(t / chunk) / total;
  }
}

// Block h: head h's splits combined (combine_splits).
KVS_GLOBAL void paged_attention_reduce_kernel(float* out, const float* part, const float* m,
                                              const float* l, int splits, int head_dim,
                                              int num_slots, int chunk, float* weights) {
  const int h = static_cast<int>(simt::bid_x());
  const long h0 = static_cast<long>(h) * splits;
  combine_splits(out + static_cast<long>(h) * head_dim, part + h0 * head_dim, m + h0, l + h0,
                 splits, head_dim, num_slots, chunk,
                 weights != nullptr ? weights + static_cast<long>(h) * num_slots : nullptr);
}

// Slots one block takes in one pass (its scores in shared memory), and split-K's chunk.
constexpr int kOnePassSlots = 4096;
constexpr int kSplitChunk = 2048;

inline void launch_paged_attention(float* out, const float* q, const PagedKv& kv, int n_heads,
                                   unsigned threads = 128, float* weights = nullptr) {
  KVS_LAUNCH(paged_attention_kernel, simt::Dim3(static_cast<unsigned>(n_heads)),
             simt::Dim3(threads), static_cast<std::size_t>(kv.num_slots) * sizeof(float), out, q,
             kv, n_heads, weights);
}

// n_queries queries, q and out [n_queries][n_heads][head_dim]; max_slots: the largest num_slots
// among them (at most kOnePassSlots).
inline void launch_paged_attention_batch(float* out, const float* q, const PagedBatch& b,
                                         int n_queries, int n_heads, int max_slots,
                                         unsigned threads = 128, float* weights = nullptr) {
  KVS_LAUNCH(paged_attention_batch_kernel,
             simt::Dim3(static_cast<unsigned>(n_heads), static_cast<unsigned>(n_queries)),
             simt::Dim3(threads), static_cast<std::size_t>(max_slots) * sizeof(float), out, q, b,
             n_heads, weights);
}

// Floats of device workspace split-K needs for n_heads heads over num_slots slots, each split's
// partial output `width` floats (head_dim; an MLA latent's rank in mla.cuh).
inline long split_workspace_floats(int n_heads, int width, int num_slots, int chunk) {
  const long splits = (num_slots + chunk - 1) / chunk;
  return static_cast<long>(n_heads) * splits * (width + 2);
}

// That workspace as the split and reduce kernels read it: part [n_heads][splits][width], then m
// and l [n_heads][splits].
struct SplitParts {
  float* part;
  float* m;
  float* l;
};
inline SplitParts split_parts(float* work, int n_heads, int splits, int width) {
  float* m = work + static_cast<long>(n_heads) * splits * width;
  return {work, m, m + static_cast<long>(n_heads) * splits};
}

// Split-K: `work` holds split_workspace_floats(...) floats of device memory.
inline void launch_paged_attention_split(float* out, const float* q, const PagedKv& kv, int n_heads,
                                         int chunk, float* work, unsigned threads = 128,
                                         float* weights = nullptr) {
  const int splits = (kv.num_slots + chunk - 1) / chunk;
  const auto [part, m, l] = split_parts(work, n_heads, splits, kv.head_dim);
  KVS_LAUNCH(paged_attention_split_kernel,
             simt::Dim3(static_cast<unsigned>(n_heads), static_cast<unsigned>(splits)),
             simt::Dim3(threads), static_cast<std::size_t>(chunk) * sizeof(float), part, m, l, q,
             kv, n_heads, chunk, weights);
  KVS_LAUNCH(paged_attention_reduce_kernel, simt::Dim3(static_cast<unsigned>(n_heads)),
             simt::Dim3(threads), 0, out, part, m, l, splits, kv.head_dim, kv.num_slots, chunk,
             weights);
}

KVS_KERNELS_END

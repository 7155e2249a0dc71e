// CPU ops: plain C++, vectorized by the compiler (omp simd), multithreaded with OpenMP where the
// work is large enough to pay for the fork/join.
#include "engine/backend/cpu/cpu_ops.h"

#include "engine/backend/cpu/attention_dot.h"
#include "engine/backend/cpu/fma.h"
#include "engine/backend/cpu/mla_ops.h"
#include "engine/backend/cpu/quant_matmul.h"
#include "engine/backend/cpu/row_dot.h"
#include "engine/backend/cpu/vec_math.h"
#include "engine/common/error.h"
#include "engine/quant/kv_codec.h"
#include "engine/sparse/key_selector.h"

#include "engine/common/openmp.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace kvscope::cpu {
namespace {

// Below this many multiply-adds a parallel region costs more than it saves.
constexpr long kParallelThreshold = 1L << 16;

// Whether attention over `n` slots splits its heads across threads (only OpenMP's `if` clauses
// call it: unused in a build without OpenMP).
[[maybe_unused]] bool attention_in_parallel(int n, const AttentionShape& shape) {
  return static_cast<long>(n) * shape.n_heads * shape.head_dim >= kParallelThreshold;
}

// Queries of one tile of paged_attention_fp32_queries: their weights and value sums stay in L1
// while a block of keys and values serves them all.
constexpr int kQueryTile = 8;

inline float dot(const float* a, const float* b, int n) {
  // Head sizes that are a multiple of 8 (every model's): the order attention_dot.h writes out.
  if (attention_dot_fits(n)) return attention_dot(a, b, n);
  // A plain loop: this file is built with -fassociative-math (see engine/CMakeLists.txt), so the
  // compiler vectorizes it with a tree reduction, as llama2.c's -Ofast build does.
  float acc = 0.0f;
  for (int j = 0; j < n; ++j) acc += a[j] * b[j];
  return acc;
}

// The largest of x[0..n) as `x[t] > m ? x[t] : m` from -inf finds it (a NaN is passed over), in
// eight running maxima the compiler keeps in one vector register: the same value as one running
// maximum, which waited on each comparison in turn.
inline float max_score_of(const float* x, int n) {
  float m[8];
  for (float& v : m) v = -INFINITY;
  int t = 0;
  for (; t + 8 <= n; t += 8)
    for (int i = 0; i < 8; ++i) m[i] = x[t + i] > m[i] ? x[t + i] : m[i];
  float r = -INFINITY;
  for (const float v : m) r = v > r ? v : r;
  for (; t < n; ++t) r = x[t] > r ? x[t] : r;
  return r;
}

// att[t] = dot(q, k_t, hd) / sqrt_hd for t0 <= t < end, key t at k + (t - t0) * row: eight keys
// a pass (then four, then one) where attention_dots takes the head size (the same bits as one at
// a time).
inline void scores(const float* q, const float* k, std::size_t row, int hd, float sqrt_hd, int t0,
                   int end, float* att) {
  if (attention_dot_fits(hd)) {
    attention_dots(q, k, row, hd, end - t0, att + t0);
    for (int t = t0; t < end; ++t) att[t] = att[t] / sqrt_hd;
    return;
  }
  for (int t = t0; t < end; ++t)
    att[t] = dot(q, k + static_cast<std::size_t>(t - t0) * row, hd) / sqrt_hd;
}

// att[t] = exp(att[t] - max) / sum over t, in place; masked slots (-inf) become 0.
inline void softmax_in_place(float* att, int n, float max_score) {
  float sum = 0.0f;
  for (int t = 0; t < n; ++t) {
    att[t] = vexp(att[t] - max_score);
    sum += att[t];
  }
  for (int t = 0; t < n; ++t) att[t] /= sum;
}

// One query head of up to kQueryTile queries that read the same blocks (one query's, or a prefill
// chunk's, each with its own num_slots) over the fp32 cache, read in place block by block, with
// the arithmetic of the llama2.c reference (divide by sqrt(head_dim), max-subtracted softmax,
// divide by the sum): per query the same dot products, softmax and value sums in the same order
// however many share the tile, so the same bits; each block's keys and values are read from
// memory once for the tile (then from L1 by its other queries). att[j]: query j's weights for this
// head. HD is the head dimension when known at compile time (the value accumulators then live in
// registers instead of round-tripping through memory for every token), 0 when only `hd` knows it.
template <int HD>
void attend_head_fp32(const KvSeqView& view, int layer, int hd, int head, int kv_head,
                      std::span<const AttentionQuery> queries, float* const* att) {
  constexpr bool kFixed = HD > 0;
  const int d = kFixed ? HD : hd;
  const auto m = static_cast<int>(queries.size());
  const std::size_t head_off = static_cast<std::size_t>(kv_head) * hd;
  const KvLayout& L = view.storage->layout();
  const int bs = L.block_size;
  const std::size_t row = static_cast<std::size_t>(L.kv_heads) * L.head_dim;
  const float sqrt_hd = std::sqrt(static_cast<float>(d));
  int n_max = 0;
  for (const AttentionQuery& a : queries) n_max = std::max(n_max, a.view.num_slots);
  const int num_blocks = (n_max + bs - 1) / bs;
  for (int b = 0; b < num_blocks; ++b) {
    const float* kt = reinterpret_cast<const float*>(view.storage->tile(
                          layer, KvKind::kKey, view.blocks[static_cast<std::size_t>(b)])) +
                      head_off;
    const int t0 = b * bs;
    for (int j = 0; j < m; ++j) {
      const AttentionQuery& a = queries[static_cast<std::size_t>(j)];
      const float* qh = a.q + static_cast<std::size_t>(head) * hd;
      // The runtime `hd`, not HD: a constant length lets the compiler vectorize across tokens
      // with a different summation order per dot, which would make scores depend on the block
      // size.
      scores(qh, kt, row, hd, sqrt_hd, t0, std::min(a.view.num_slots, t0 + bs), att[j]);
    }
  }
  for (int j = 0; j < m; ++j) {
    const AttentionQuery& a = queries[static_cast<std::size_t>(j)];
    const int n = a.view.num_slots;
    float* w = att[j];
    if (a.view.slot_live != nullptr) {
      for (int t = 0; t < n; ++t) {
        if (a.view.slot_live[t] == 0) w[t] = -INFINITY;  // evicted: weight 0
      }
    }
    if (a.view.selector != nullptr) {  // sparse attention: the slots it skips get weight 0
      a.view.selector->select(SelectionQuery{&a.view, layer, head, kv_head,
                                             a.q + static_cast<std::size_t>(head) * hd, hd},
                              std::span<float>(w, static_cast<std::size_t>(n)));
    }
    softmax_in_place(w, n, max_score_of(w, n));
  }
  constexpr int kSlots = kFixed ? HD : 1;
  float acc[kQueryTile][kSlots];
  for (int j = 0; j < m; ++j) {
    float* sum =
        kFixed ? acc[j]
               : queries[static_cast<std::size_t>(j)].out + static_cast<std::size_t>(head) * hd;
    for (int i = 0; i < d; ++i) sum[i] = 0.0f;
  }
  for (int b = 0; b < num_blocks; ++b) {
    const float* vt = reinterpret_cast<const float*>(view.storage->tile(
                          layer, KvKind::kValue, view.blocks[static_cast<std::size_t>(b)])) +
                      head_off;
    const int t0 = b * bs;
    for (int j = 0; j < m; ++j) {
      const AttentionQuery& a = queries[static_cast<std::size_t>(j)];
      float* sum = kFixed ? acc[j] : a.out + static_cast<std::size_t>(head) * hd;
      const float* w = att[j];
      const int end = std::min(a.view.num_slots, t0 + bs);
      for (int t = t0; t < end; ++t) {
        const float x = w[t];
        const float* vh = vt + static_cast<std::size_t>(t - t0) * row;
        // fma, not +=: the sum over t keeps its order (no reassociation across tokens), so it
        // does not depend on where block boundaries fall.
#pragma omp simd
        for (int i = 0; i < d; ++i) sum[i] = cpu::fma(x, vh[i], sum[i]);
      }
    }
  }
  if constexpr (kFixed) {
    for (int j = 0; j < m; ++j) {
      std::memcpy(queries[static_cast<std::size_t>(j)].out + static_cast<std::size_t>(head) * hd,
                  acc[j], sizeof(acc[j]));
    }
  }
}

// fn.template operator()<HD>() for the head sizes the attention kernels are specialized on (their
// value sums in registers), else fn.template operator()<0>() (the run-time form).
template <class Fn>
auto with_head_dim(int hd, const Fn& fn) {
  switch (hd) {
    case 8:
      return fn.template operator()<8>();
    case 16:
      return fn.template operator()<16>();
    case 32:
      return fn.template operator()<32>();
    case 64:
      return fn.template operator()<64>();
    case 128:
      return fn.template operator()<128>();
    default:
      return fn.template operator()<0>();
  }
}

auto* attend_fp32_for(int hd) {
  return with_head_dim(hd, []<int HD>() { return &attend_head_fp32<HD>; });
}

// scratch: [n_heads][n] weights, then [kv_heads][head_dim] decoded heads.
void size_scratch(const AttentionShape& shape, int n, std::vector<float>& scratch) {
  const std::size_t need = static_cast<std::size_t>(shape.n_heads) * n +
                           static_cast<std::size_t>(shape.kv_heads) * shape.head_dim;
  if (scratch.size() < need) scratch.resize(need);
}

// Step 2 of query a's attention over KV head kvh, between its scores and its value sum: sparse
// attention's selection (the slots it skips get weight 0, and the maxima are taken again), then
// softmax per query head of the group, and the heads' outputs zeroed. att: a's weights
// [n_heads][num_slots]; max_g: its group's score maxima.
void select_and_softmax(int layer, const AttentionShape& shape, int kvh, const AttentionQuery& a,
                        float* att, float* max_g) {
  const int hd = shape.head_dim;
  const int group = shape.n_heads / shape.kv_heads;
  const int h0 = kvh * group;
  const int n = a.view.num_slots;
  const auto row = [&](int g) {
    return att + static_cast<std::size_t>(h0 + g) * static_cast<std::size_t>(n);
  };
  if (a.view.selector != nullptr) {
    for (int g = 0; g < group; ++g) {
      float* r = row(g);
      a.view.selector->select(SelectionQuery{&a.view, layer, h0 + g, kvh,
                                             a.q + static_cast<std::size_t>(h0 + g) * hd, hd},
                              std::span<float>(r, static_cast<std::size_t>(n)));
      max_g[g] = -INFINITY;
      for (int t = 0; t < n; ++t) max_g[g] = std::max(max_g[g], r[t]);
    }
  }
  for (int g = 0; g < group; ++g) {
    softmax_in_place(row(g), n, max_g[g]);
    std::memset(a.out + static_cast<std::size_t>(h0 + g) * hd, 0,
                static_cast<std::size_t>(hd) * sizeof(float));
  }
}

// One KV head's attention for a tile of up to kQueryTile queries that read the same slots (one
// token's query, or a prefill chunk's causal queries, each up to its own num_slots): the scores
// of each query's GQA group over its live slots, their softmax, and the weighted sum of values.
// key_head / value_head(t, tmp) give the head's head_dim floats for slot t (dequantized into tmp
// [head_dim], or a pointer to floats kept elsewhere), read once for the whole tile. Each query's
// arithmetic is the same whichever gives them and whichever tile it is in (its scores, maxima and
// value sums in slot order). att[j]: query j's weights [n_heads][its num_slots], of which this
// writes its group's rows.
template <class KeyHead, class ValueHead>
void attend_kv_head(int layer, const AttentionShape& shape, int kvh,
                    std::span<const AttentionQuery> tile, float* const* att, float* tmp,
                    const KeyHead& key_head, const ValueHead& value_head) {
  const int hd = shape.head_dim;
  const int group = shape.n_heads / shape.kv_heads;
  const int h0 = kvh * group;
  const float sqrt_hd = std::sqrt(static_cast<float>(hd));
  const int m = static_cast<int>(tile.size());
  const std::uint8_t* live = tile.front().view.slot_live;  // the tile's queries share their slots
  int n_max = 0;
  for (const AttentionQuery& a : tile) n_max = std::max(n_max, a.view.num_slots);
  const auto n_of = [&](int j) { return tile[static_cast<std::size_t>(j)].view.num_slots; };
  const auto row = [&](int j, int g) {
    return att[j] + static_cast<std::size_t>(h0 + g) * static_cast<std::size_t>(n_of(j));
  };
  thread_local std::vector<float> maxima;  // [m][group]
  maxima.assign(static_cast<std::size_t>(m) * group, -INFINITY);
  // 1. Scores q . k / sqrt(head_dim) over live slots; evicted slots score -inf.
  if (live != nullptr) {
    for (int j = 0; j < m; ++j) {
      for (int t = 0; t < n_of(j); ++t) {
        if (live[t] != 0) continue;
        for (int g = 0; g < group; ++g) row(j, g)[t] = -INFINITY;
      }
    }
  }
  const bool written_out = attention_dot_fits(hd) && group <= 16;
  for (int t = 0; t < n_max; ++t) {
    if (live != nullptr && live[t] == 0) continue;
    const float* kh = key_head(t, tmp);
    for (int j = 0; j < m; ++j) {
      if (t >= n_of(j)) continue;
      const float* qj = tile[static_cast<std::size_t>(j)].q + static_cast<std::size_t>(h0) * hd;
      float dots[16];
      if (written_out)  // the group's heads together: independent chains, the same bits
        attention_dots_one_key(qj, static_cast<std::size_t>(hd), group, kh, hd, dots);
      float* max_j = maxima.data() + static_cast<std::size_t>(j) * group;
      for (int g = 0; g < group; ++g) {
        const float d = written_out ? dots[g] : dot(qj + static_cast<std::size_t>(g) * hd, kh, hd);
        const float sc = d / sqrt_hd;
        row(j, g)[t] = sc;
        max_j[g] = std::max(max_j[g], sc);
      }
    }
  }
  // 2. Sparse attention's selection, then softmax per query head.
  for (int j = 0; j < m; ++j) {
    select_and_softmax(layer, shape, kvh, tile[static_cast<std::size_t>(j)], att[j],
                       maxima.data() + static_cast<std::size_t>(j) * group);
  }
  // 3. Weighted sum of values.
  for (int t = 0; t < n_max; ++t) {
    if (live != nullptr && live[t] == 0) continue;
    const float* vh = value_head(t, tmp);
    for (int j = 0; j < m; ++j) {
      if (t >= n_of(j)) continue;
      for (int g = 0; g < group; ++g) {
        const float w = row(j, g)[t];
        if (w == 0.0f) continue;
        float* oh = tile[static_cast<std::size_t>(j)].out + static_cast<std::size_t>(h0 + g) * hd;
#pragma omp simd
        for (int i = 0; i < hd; ++i) oh[i] += w * vh[i];
      }
    }
  }
}

// Attention of every query head of one token over a non-fp32 pool, one KV head at a time (a
// tile of one query): its keys and values are read once and serve the whole GQA group.
// key_head / value_head(t, kvh, tmp) as attend_kv_head's. scratch holds [n_heads][n] weights
// and [kv_heads][head_dim] work space.
template <class KeyHead, class ValueHead>
void attend_heads(const KvSeqView& view, int layer, const AttentionShape& shape, const float* q,
                  float* out, std::vector<float>& scratch, const KeyHead& key_head,
                  const ValueHead& value_head) {
  const int n = view.num_slots;
  const int hd = shape.head_dim;
  const std::size_t weights_size = static_cast<std::size_t>(shape.n_heads) * n;
  size_scratch(shape, n, scratch);
  AttentionQuery one;
  one.view = view;
  one.q = q;
  one.out = out;
  float* const att = scratch.data();
#pragma omp parallel for schedule(static) if (attention_in_parallel(n, shape))
  for (int kvh = 0; kvh < shape.kv_heads; ++kvh) {
    float* tmp = scratch.data() + weights_size + static_cast<std::size_t>(kvh) * hd;  // [head_dim]
    attend_kv_head(
        layer, shape, kvh, std::span<const AttentionQuery>(&one, 1), &att, tmp,
        [&](int t, float* buf) { return key_head(t, kvh, buf); },
        [&](int t, float* buf) { return value_head(t, kvh, buf); });
  }
}

void paged_attention_fp32(const KvSeqView& view, int layer, const AttentionShape& shape,
                          const float* q, float* out, float* weights /*[n_heads][n]*/) {
  const int n = view.num_slots, hd = shape.head_dim;
  const int group = shape.n_heads / shape.kv_heads;
  auto* attend = attend_fp32_for(hd);
  AttentionQuery one;
  one.view = view;
  one.q = q;
  one.out = out;
#pragma omp parallel for schedule(static) if (attention_in_parallel(n, shape))
  for (int h = 0; h < shape.n_heads; ++h) {
    float* att = weights + static_cast<std::size_t>(h) * n;
    attend(view, layer, hd, h, h / group, std::span<const AttentionQuery>(&one, 1), &att);
  }
}

void notify_observer(AttentionObserver* observer, int layer, int n_heads, int query_pos, int n,
                     const float* weights) {
  if (observer == nullptr) return;
  for (int h = 0; h < n_heads; ++h) {
    observer->on_attention(layer, h, query_pos,
                           std::span<const float>(weights + static_cast<std::size_t>(h) * n,
                                                  static_cast<std::size_t>(n)));
  }
}

// out[t * d + i] = row_dot(w + i * n, x + t * n, n) for rows i in [lo, hi) and every input t < m.
// The rows go by blocks of 128 KiB, which stay in L2; each block meets the inputs a group at a
// time, a group small enough to stay in L1 (8 inputs of SmolLM2's 576 floats are 18 KiB), each
// row meeting the whole group while it is in L1 (row_dot8/row_dot4). While the last group runs,
// the next block is prefetched into L2, so only the first block waits for memory. Every element
// is still row_dot of its (row, input): the order of the loops only changes which loads hit.
// Measured on SmolLM2's shape at 1 thread (docs/performance.md, "Several sequences per step"): 16
// sequences went from 2.4x to 4.4x the tokens/s of one; one sequence (no prefetch: its single
// stream is already the prefetcher's best case) is unchanged.
void fp32_rows(const float* w, long lo, long hi, const float* x, int m, int n, float* out, int d) {
  constexpr long kBlockBytes = 128 * 1024, kGroupBytes = 24 * 1024;
  const long row_bytes = static_cast<long>(n) * static_cast<long>(sizeof(float));
  const long block = std::max(1L, kBlockBytes / row_bytes);
#if defined(__AVX512VL__)
  constexpr int kWideGroup = 8;  // row_dot8's 16 accumulators fit AVX-512VL's 32 registers
#else
  constexpr int kWideGroup = 4;  // 16 vector registers: row_dot8 would spill
#endif
  const int group = row_bytes * kWideGroup <= kGroupBytes ? kWideGroup : 4;
  for (long b0 = lo; b0 < hi; b0 += block) {
    const long b1 = std::min(hi, b0 + block);
    for (int t0 = 0; t0 < m; t0 += group) {
      const int t1 = std::min(m, t0 + group);
      const float* xg = x + static_cast<long>(t0) * n;
      const bool last_group = t1 == m;
      for (long i = b0; i < b1; ++i) {
        const float* wr = w + i * n;
        if (m > 1 && last_group && i + block < hi) {
          const char* next = reinterpret_cast<const char*>(wr + block * n);
          for (long off = 0; off < row_bytes; off += 64) __builtin_prefetch(next + off, 0, 2);
        }
        float* col = out + static_cast<long>(t0) * d + i;
        const int g = t1 - t0;
        if (g == 8) {
          float eight[8];
          row_dot8(wr, xg, n, n, eight);
          for (int k = 0; k < 8; ++k) col[static_cast<long>(k) * d] = eight[k];
          continue;
        }
        int t = 0;
        for (; t + 4 <= g; t += 4) {
          float four[4];
          row_dot4(wr, xg + static_cast<long>(t) * n, n, n, four);
          for (int k = 0; k < 4; ++k) col[static_cast<long>(t + k) * d] = four[k];
        }
        for (; t < g; ++t)
          col[static_cast<long>(t) * d] = row_dot(wr, xg + static_cast<long>(t) * n, n);
      }
    }
  }
}

}  // namespace

void matmul(float* out, const float* x, const float* w, int n, int d) {
  const MatmulOut one{out, w, d};
  matmul_shared_input(x, n, std::span<const MatmulOut>(&one, 1));
}

void matmul_batch(const float* x, int m, int n, std::span<const MatmulOut> outs) {
  long rows = 0;
  bool quantized = false;
  for (const MatmulOut& o : outs) {
    rows += o.d;
    quantized = quantized || o.q.data != nullptr;
  }
  // Quantized weights meet x quantized once per call, by the calling thread; the row loops of
  // every thread then read it.
  // (A thread_local named inside the lambda would be each worker's own, empty one: go through a
  // reference to the caller's.)
  thread_local QuantizedActs caller_acts;
  QuantizedActs& acts = caller_acts;
  if (quantized) quantize_acts(x, m, n, acts);
  const QuantIsa isa = quantized ? best_quant_isa() : QuantIsa::kScalar;
  // Rows [begin, end) of the outputs laid end to end: each thread takes one contiguous range, so
  // it reads one sequential stream of weights, what the hardware prefetcher serves best
  // (measured: interleaving four rows dropped bandwidth from ~26 to ~15 GB/s here).
  auto run_rows = [&](long begin, long end) {
    long base = 0;
    for (const MatmulOut& o : outs) {
      const long lo = std::max(begin, base), hi = std::min(end, base + o.d);
      if (o.q.data != nullptr) {
        if (lo < hi) quant_matmul_rows(isa, o.q, lo - base, hi - base, acts, o.out, o.d);
        base += o.d;
        continue;
      }
      fp32_rows(o.w, lo - base, hi - base, x, m, n, o.out, o.d);
      base += o.d;
    }
  };
  if (rows * n * m < kParallelThreshold || omp_get_max_threads() == 1) {
    run_rows(0, rows);
    return;
  }
#pragma omp parallel
  {
    // The static split OpenMP would make, over all rows at once, at whole panels of the
    // quantized kernels (kPanelRows rows: a split inside one makes both threads run all of it).
    const long t = omp_get_thread_num(), nt = omp_get_num_threads();
    const auto split = [&](long i) {
      return i == nt ? rows : rows * i / nt / kPanelRows * kPanelRows;
    };
    run_rows(split(t), split(t + 1));
  }
}

void matmul_shared_input(const float* x, int n, std::span<const MatmulOut> outs) {
  matmul_batch(x, 1, n, outs);
}

void rmsnorm(float* out, const float* x, const float* w, int n, float eps) {
  float ss = 0.0f;
  for (int j = 0; j < n; ++j) ss += x[j] * x[j];
  ss /= static_cast<float>(n);
  ss += eps;
  ss = 1.0f / std::sqrt(ss);
  for (int j = 0; j < n; ++j) out[j] = w[j] * (ss * x[j]);
}

void rope(float* q, float* k, int pos, int q_dim, int kv_dim, int head_dim, float theta) {
  // Every head rotates its pairs by the same angles: compute the head_dim / 2 of them once, with
  // the same float arithmetic per pair as llama2.c (so results stay bit-identical).
  constexpr int kMaxPairs = 256;
  float cos_sin[2 * kMaxPairs];
  const int pairs = head_dim / 2;
  const bool table = pairs <= kMaxPairs;
  auto angle = [&](int hd, float& fcr, float& fci) {
    const float freq =
        1.0f / std::pow(theta, static_cast<float>(hd) / static_cast<float>(head_dim));
    const float val = static_cast<float>(pos) * freq;
    fcr = std::cos(val);
    fci = std::sin(val);
  };
  if (table) {
    for (int p = 0; p < pairs; ++p) angle(2 * p, cos_sin[2 * p], cos_sin[2 * p + 1]);
  }
  for (int i = 0; i < q_dim; i += 2) {
    const int hd = i % head_dim;
    float fcr, fci;
    if (table) {
      fcr = cos_sin[hd];
      fci = cos_sin[hd + 1];
    } else {
      angle(hd, fcr, fci);
    }
    float v0 = q[i], v1 = q[i + 1];
    q[i] = v0 * fcr - v1 * fci;
    q[i + 1] = v0 * fci + v1 * fcr;
    if (i < kv_dim) {
      v0 = k[i];
      v1 = k[i + 1];
      k[i] = v0 * fcr - v1 * fci;
      k[i + 1] = v0 * fci + v1 * fcr;
    }
  }
}

void rope_cos_sin(int pos, int head_dim, float theta, float* cos_sin) {
  for (int hd = 0; hd < head_dim; hd += 2) {
    const float freq =
        1.0f / std::pow(theta, static_cast<float>(hd) / static_cast<float>(head_dim));
    const float val = static_cast<float>(pos) * freq;
    cos_sin[hd] = std::cos(val);
    cos_sin[hd + 1] = std::sin(val);
  }
}

void rope_keys(float* k, int kv_dim, int head_dim, const float* cos_sin) {
  for (int i = 0; i < kv_dim; i += 2) {
    const int hd = i % head_dim;
    const float fcr = cos_sin[hd], fci = cos_sin[hd + 1];
    const float v0 = k[i], v1 = k[i + 1];
    k[i] = v0 * fcr - v1 * fci;
    k[i + 1] = v0 * fci + v1 * fcr;
  }
}

void swiglu(float* hb, const float* hb2, int n) {
  for (int i = 0; i < n; ++i) {
    float v = hb[i];
    v *= 1.0f / (1.0f + vexp(-v));
    hb[i] = v * hb2[i];
  }
}

void kv_write(const KvSeqView& view, int layer, const float* k, const float* v) {
  if (view.mla != nullptr || view.storage->layout().is_latent()) {
    if (view.mla == nullptr)
      throw Error("kv cache", "a latent (MLA) pool needs a view with its MlaCodec");
    mla_kv_write(view, layer, k, v);  // the latent cache (mla_ops.cpp)
    return;
  }
  // Quantize on write: the codec stores the row in the layer's K and V formats.
  quant::write_token(view, layer, KvKind::kKey, k);
  quant::write_token(view, layer, KvKind::kValue, v);
  if (view.decoded != nullptr) keep_written_row(view, layer, k, v);
}

void paged_attention(const KvSeqView& view, int layer, const AttentionShape& shape, const float* q,
                     float* out, int query_pos, AttentionObserver* observer,
                     std::vector<float>& scratch) {
  if (view.mla != nullptr || view.storage->layout().is_latent()) {
    if (view.mla == nullptr)
      throw Error("kv cache", "a latent (MLA) pool needs a view with its MlaCodec");
    if (view.selector != nullptr)
      throw Error("kv cache", "sparse key selection over an MLA latent cache is not supported");
    mla_attention(view, layer, shape, q, out, query_pos, observer, scratch);
    return;
  }
  const int n = view.num_slots;
  size_scratch(shape, n, scratch);
  if (view.storage->layout().k_format.dtype == KvDtype::kF32 &&
      view.storage->layout().v_format.dtype == KvDtype::kF32) {
    paged_attention_fp32(view, layer, shape, q, out, scratch.data());
    notify_observer(observer, layer, shape.n_heads, query_pos, n, scratch.data());
    return;
  }
  if (view.decoded != nullptr) {
    // The sequence's float copy, brought up to date: each slot dequantized once, not per query.
    refresh_decoded(view, layer, n);
    const AttentionQuery one{view, q, out, query_pos, observer};
    paged_attention_decoded_queries(layer, shape, std::span<const AttentionQuery>(&one, 1), scratch,
                                    decoded_read(*view.decoded, layer));
    return;
  }
  // Readers dequantize one head of one token at a time (fp32 tiles are read in place).
  const quant::TileReader keys(view, layer, KvKind::kKey);
  const quant::TileReader values(view, layer, KvKind::kValue);
  attend_heads(
      view, layer, shape, q, out, scratch,
      [&](int t, int kvh, float* tmp) { return keys.head(t, kvh, tmp); },
      [&](int t, int kvh, float* tmp) { return values.head(t, kvh, tmp); });
  notify_observer(observer, layer, shape.n_heads, query_pos, n, scratch.data());
}

bool tiles_fp32_attention(const KvSeqView& view) {
  const KvLayout& L = view.storage->layout();
  return view.mla == nullptr && !L.is_latent() && view.slot_live == nullptr &&
         view.selector == nullptr && L.k_format.dtype == KvDtype::kF32 &&
         L.v_format.dtype == KvDtype::kF32;
}

void paged_attention_fp32_queries(int layer, const AttentionShape& shape,
                                  std::span<const AttentionQuery> queries,
                                  std::vector<float>& scratch) {
  if (queries.empty()) return;
  const KvSeqView& view = queries.front().view;
  for (const AttentionQuery& a : queries) {
    if (!tiles_fp32_attention(a.view) || a.view.blocks.data() != view.blocks.data() ||
        a.view.blocks.size() != view.blocks.size() || a.view.storage != view.storage) {
      throw InternalError("paged_attention_fp32_queries",
                          "the queries must read the same blocks of one fp32 pool, without "
                          "eviction, selection or a latent cache");
    }
  }
  const int hd = shape.head_dim;
  const int group = shape.n_heads / shape.kv_heads;
  auto* attend = attend_fp32_for(hd);
  for (std::size_t i0 = 0; i0 < queries.size(); i0 += kQueryTile) {
    const std::span<const AttentionQuery> tile =
        queries.subspan(i0, std::min<std::size_t>(kQueryTile, queries.size() - i0));
    // Each query's weights [n_heads][its num_slots], one after another (notify_observer's layout).
    std::size_t need = 0;
    int n_max = 0;
    for (const AttentionQuery& a : tile) {
      need += static_cast<std::size_t>(shape.n_heads) * a.view.num_slots;
      n_max = std::max(n_max, a.view.num_slots);
    }
    if (scratch.size() < need) scratch.resize(need);
#pragma omp parallel for schedule(static) if (attention_in_parallel(n_max, shape))
    for (int h = 0; h < shape.n_heads; ++h) {
      float* att[kQueryTile];
      std::size_t at = 0;
      for (std::size_t j = 0; j < tile.size(); ++j) {
        const int n = tile[j].view.num_slots;
        att[j] = scratch.data() + at + static_cast<std::size_t>(h) * n;
        at += static_cast<std::size_t>(shape.n_heads) * n;
      }
      attend(view, layer, hd, h, h / group, tile, att);
    }
    std::size_t at = 0;
    for (const AttentionQuery& a : tile) {
      notify_observer(a.observer, layer, shape.n_heads, a.query_pos, a.view.num_slots,
                      scratch.data() + at);
      at += static_cast<std::size_t>(shape.n_heads) * a.view.num_slots;
    }
  }
}

bool shares_decoded_kv(const KvSeqView& view) {
  const KvLayout& L = view.storage->layout();
  return view.mla == nullptr && !L.is_latent() && view.slot_live == nullptr &&
         L.staging_bytes_per_sequence() == 0 &&
         (L.k_format.dtype != KvDtype::kF32 || L.v_format.dtype != KvDtype::kF32);
}

namespace {

// Slots [from, to) of `reader`'s heads into out ([kv_heads][n][head_dim], n slots per head):
// dequantized into place, or (fp32 tiles) a pointer into the pool, copied.
void decode_slots(const quant::TileReader& reader, int from, int to, int kv_heads, int head_dim,
                  int n, float* out) {
  const auto hd = static_cast<std::size_t>(head_dim);
#pragma omp parallel for schedule(static) if (static_cast <long>(to - from) *     \
                                                  static_cast <long>(kv_heads) *  \
                                                  static_cast <long>(head_dim) >= \
                                              kParallelThreshold)
  for (int t = from; t < to; ++t) {
    for (int kvh = 0; kvh < kv_heads; ++kvh) {
      float* at = out + (static_cast<std::size_t>(kvh) * n + static_cast<std::size_t>(t)) * hd;
      const float* h = reader.head(t, kvh, at);
      if (h != at) std::memcpy(at, h, hd * sizeof(float));
    }
  }
}

}  // namespace

void decode_kv(const KvSeqView& view, int layer, int n, DecodedKv& out) {
  const KvLayout& L = view.storage->layout();
  out.n = n;
  out.kv_heads = L.kv_heads;
  out.head_dim = L.head_dim;
  const std::size_t row = static_cast<std::size_t>(L.kv_heads) * L.head_dim;
  out.k.resize(static_cast<std::size_t>(n) * row);
  out.v.resize(static_cast<std::size_t>(n) * row);
  KvSeqView all = view;  // the readers look at slots < num_slots only
  all.num_slots = n;
  decode_slots(quant::TileReader(all, layer, KvKind::kKey), 0, n, L.kv_heads, L.head_dim, n,
               out.k.data());
  decode_slots(quant::TileReader(all, layer, KvKind::kValue), 0, n, L.kv_heads, L.head_dim, n,
               out.v.data());
}

namespace {

// A decoded copy's sequence must be one pool's, with every slot live and K/V heads.
void check_mirrors(const DecodedKvCache& cache, const KvSeqView& view, int n) {
  const KvLayout& L = view.storage->layout();
  if (&cache.storage() != view.storage || n > cache.capacity() || view.slot_live != nullptr ||
      view.mla != nullptr || L.is_latent()) {
    throw InternalError("decoded K/V cache",
                        "it mirrors the live K/V heads of one pool's sequence within its "
                        "capacity of " +
                            std::to_string(cache.capacity()) + " slots; this view has " +
                            std::to_string(n) + " slots" +
                            (&cache.storage() != view.storage ? " of another pool" : "") +
                            (view.slot_live != nullptr ? ", evicted slots" : "") +
                            (L.is_latent() ? ", a latent cache" : ""));
  }
}

// Row [kv_heads * head_dim] into slot t of d's k (or v) array, head by head.
void scatter_row(const float* row, int t, int kv_heads, int head_dim, int n, float* to) {
  const auto hd = static_cast<std::size_t>(head_dim);
  for (int h = 0; h < kv_heads; ++h) {
    std::memcpy(to + (static_cast<std::size_t>(h) * n + static_cast<std::size_t>(t)) * hd,
                row + static_cast<std::size_t>(h) * hd, hd * sizeof(float));
  }
}

}  // namespace

void keep_written_row(const KvSeqView& view, int layer, const float* k, const float* v) {
  DecodedKvCache& cache = *view.decoded;
  const int slot = view.write_slot();
  check_mirrors(cache, view, slot + 1);
  if (slot != cache.written(layer)) {
    throw InternalError("decoded K/V cache",
                        "layer " + std::to_string(layer) + " wrote slot " + std::to_string(slot) +
                            " after " + std::to_string(cache.written(layer)) +
                            " rows: the copy follows a sequence written slot after slot");
  }
  DecodedKv& raw = cache.raw(layer);
  if (cache.key_group() > 0) scatter_row(k, slot, raw.kv_heads, raw.head_dim, raw.n, raw.k.data());
  if (cache.value_group() > 0)
    scatter_row(v, slot, raw.kv_heads, raw.head_dim, raw.n, raw.v.data());
  ++cache.written(layer);
}

int decoded_raw_from(int n, int group) {
  return group > 0 ? n - n % group : n;
}

DecodedRead decoded_read(const DecodedKvCache& cache, int layer) {
  return DecodedRead{&cache.layer(layer), &cache.raw(layer), cache.key_group(),
                     cache.value_group()};
}

void refresh_decoded(const KvSeqView& view, int layer, int n) {
  DecodedKvCache& cache = *view.decoded;
  check_mirrors(cache, view, n);
  const KvLayout& L = view.storage->layout();
  DecodedKv& d = cache.layer(layer);
  const auto refresh = [&](KvKind kind, int group, int& final_slots, std::vector<float>& to) {
    if (n < final_slots) {
      throw InternalError("decoded K/V cache",
                          "layer " + std::to_string(layer) + " held " +
                              std::to_string(final_slots) + " final slots and the view now has " +
                              std::to_string(n) + ": the copy is for a sequence that only grows");
    }
    if (group > 0 && cache.written(layer) < n) {
      throw InternalError("decoded K/V cache", "layer " + std::to_string(layer) + " has " +
                                                   std::to_string(cache.written(layer)) +
                                                   " rows kept of the " + std::to_string(n) +
                                                   " the view reads: its writes went by the copy");
    }
    // Slots of closed groups (every slot of a format that stages none) are final: dequantized
    // once. A staging format's open group is read from the rows as written.
    const int closed = decoded_raw_from(n, group);
    KvSeqView upto = view;  // the reader looks at slots < num_slots only: no open group
    upto.num_slots = closed;
    decode_slots(quant::TileReader(upto, layer, kind), final_slots, closed, L.kv_heads, L.head_dim,
                 d.n, to.data());
    final_slots = std::max(final_slots, closed);
  };
  refresh(KvKind::kKey, cache.key_group(), cache.final_keys(layer), d.k);
  refresh(KvKind::kValue, cache.value_group(), cache.final_values(layer), d.v);
}

namespace {

// Query heads of one GQA group the value sums take at a time.
constexpr int kValueHeads = 4;

// Slots [t0, t1) of G query heads' value sums: out[g][i] += r[g][t] * v_t[i] for every slot whose
// weight is not 0, in slot order, each element its own chain of multiply-adds (the arithmetic of
// one head at a time, so the same bits); the G heads' sums stay in registers (512-bit ones where
// the CPU has them: a wider vector changes no element's arithmetic) and share each value row's
// loads.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define KVSCOPE_WIDE_VECTORS __attribute__((target("prefer-vector-width=512"), noinline))
#else
#define KVSCOPE_WIDE_VECTORS
#endif
template <int HD, int G>
KVSCOPE_WIDE_VECTORS void add_values_g(const float* const* r, float* const* out,
                                       const float* values, int t0, int t1) {
  float acc[G][HD];
  for (int g = 0; g < G; ++g) std::memcpy(acc[g], out[g], sizeof acc[g]);
  for (int t = t0; t < t1; ++t) {
    const float* vh = values + static_cast<std::size_t>(t) * HD;
    for (int g = 0; g < G; ++g) {
      const float w = r[g][t];
      if (w == 0.0f) continue;
#pragma omp simd
      for (int i = 0; i < HD; ++i) acc[g][i] += w * vh[i];
    }
  }
  for (int g = 0; g < G; ++g) std::memcpy(out[g], acc[g], sizeof acc[g]);
}

template <int HD>
void add_values_heads(int count, const float* const* r, float* const* out, const float* values,
                      int t0, int t1) {
  static_assert(kValueHeads == 4);
  switch (count) {
    case 1:
      return add_values_g<HD, 1>(r, out, values, t0, t1);
    case 2:
      return add_values_g<HD, 2>(r, out, values, t0, t1);
    case 3:
      return add_values_g<HD, 3>(r, out, values, t0, t1);
    default:
      return add_values_g<HD, 4>(r, out, values, t0, t1);
  }
}

// Where query j reads slots [t0, t1) of a head: fn(lo, hi, base) for the part below `from` in
// `decoded`, then the part from `from` on in `raw` (the rows as written: a KIVI group still open
// at the query's time), slot t at base + t * head_dim.
template <class Fn>
inline void by_source(int t0, int t1, int from, const float* decoded, const float* raw,
                      const Fn& fn) {
  if (t0 < std::min(t1, from)) fn(t0, std::min(t1, from), decoded);
  if (std::max(t0, from) < t1) fn(std::max(t0, from), t1, raw);
}

// attend_kv_head for a tile of queries over decoded keys and values ([kv_heads][n][head_dim]),
// with each query's arithmetic unchanged: the scores' dots eight keys at a pass (attention_dot8:
// the same bits as one at a time), and each query head's value sum kept in registers over a
// block of slots (HD > 0: the head size known when compiled) instead of read and written back at
// every slot; the same multiply-adds, per element in slot order.
template <int HD>
void attend_decoded_tile(int layer, const AttentionShape& shape, int kvh,
                         std::span<const AttentionQuery> tile, float* const* att,
                         const DecodedRead& read) {
  constexpr bool kFixed = HD > 0;
  const int hd = kFixed ? HD : shape.head_dim;
  const int group = shape.n_heads / shape.kv_heads;
  const int h0 = kvh * group;
  const float sqrt_hd = std::sqrt(static_cast<float>(hd));
  const int m = static_cast<int>(tile.size());
  const std::size_t head_at =
      static_cast<std::size_t>(kvh) * static_cast<std::size_t>(read.kv->n) * hd;
  const float* keys = read.kv->k.data() + head_at;
  const float* values = read.kv->v.data() + head_at;
  // The rows as written (null where the format stages none: every slot is read decoded).
  const float* raw_keys = read.key_group > 0 ? read.raw->k.data() + head_at : nullptr;
  const float* raw_values = read.value_group > 0 ? read.raw->v.data() + head_at : nullptr;
  const auto n_of = [&](int j) { return tile[static_cast<std::size_t>(j)].view.num_slots; };
  const auto row = [&](int j, int g) {
    return att[j] + static_cast<std::size_t>(h0 + g) * static_cast<std::size_t>(n_of(j));
  };
  thread_local std::vector<float> maxima;  // [m][group]
  maxima.resize(static_cast<std::size_t>(m) * group);
  // 1. Scores (every slot is live: shares_decoded_kv): the dots a block of keys at a time for all
  // of the tile's query heads (the block stays in L1 while they read it), then each divided by
  // sqrt(head_dim) and the largest found, eight lanes at a time.
  const bool written_out = attention_dot_fits(hd) && group <= 16;  // as attend_kv_head
  constexpr int kKeyBlock = 64;
  int n_all = 0;
  for (int j = 0; j < m; ++j) n_all = std::max(n_all, n_of(j));
  for (int t0 = 0; t0 < n_all; t0 += kKeyBlock) {
    for (int j = 0; j < m; ++j) {
      const int t1 = std::min(t0 + kKeyBlock, n_of(j));
      const int raw_from = decoded_raw_from(n_of(j), read.key_group);
      for (int g = 0; g < group; ++g) {
        const float* qh =
            tile[static_cast<std::size_t>(j)].q + static_cast<std::size_t>(h0 + g) * hd;
        float* r = row(j, g);
        by_source(t0, t1, raw_from, keys, raw_keys, [&](int lo, int hi, const float* k) {
          if (written_out) {
            attention_dots(qh, k + static_cast<std::size_t>(lo) * hd, static_cast<std::size_t>(hd),
                           hd, hi - lo, r + lo);
          } else {
            for (int t = lo; t < hi; ++t) r[t] = dot(qh, k + static_cast<std::size_t>(t) * hd, hd);
          }
        });
      }
    }
  }
  for (int j = 0; j < m; ++j) {
    const int n = n_of(j);
    for (int g = 0; g < group; ++g) {
      float* r = row(j, g);
      for (int t = 0; t < n; ++t) r[t] = r[t] / sqrt_hd;
      maxima[static_cast<std::size_t>(j) * group + g] = max_score_of(r, n);
    }
  }
  // 2. Sparse attention's selection, then softmax per query head.
  for (int j = 0; j < m; ++j) {
    select_and_softmax(layer, shape, kvh, tile[static_cast<std::size_t>(j)], att[j],
                       maxima.data() + static_cast<std::size_t>(j) * group);
  }
  // 3. Weighted sum of values, a block of slots at a time (its values stay in L1 for the tile).
  constexpr int kSlotBlock = 64;
  int n_max = 0;
  for (int j = 0; j < m; ++j) n_max = std::max(n_max, n_of(j));
  for (int t0 = 0; t0 < n_max; t0 += kSlotBlock) {
    for (int j = 0; j < m; ++j) {
      const int t1 = std::min(t0 + kSlotBlock, n_of(j));
      const int raw_from = decoded_raw_from(n_of(j), read.value_group);
      if constexpr (kFixed) {
        // Up to four of the group's heads at a time, sharing each value row's loads.
        for (int g0 = 0; g0 < group; g0 += kValueHeads) {
          const int count = std::min(kValueHeads, group - g0);
          const float* r[kValueHeads];
          float* oh[kValueHeads];
          for (int g = 0; g < count; ++g) {
            r[g] = row(j, g0 + g);
            oh[g] =
                tile[static_cast<std::size_t>(j)].out + static_cast<std::size_t>(h0 + g0 + g) * hd;
          }
          by_source(t0, t1, raw_from, values, raw_values, [&](int lo, int hi, const float* v) {
            add_values_heads<HD>(count, r, oh, v, lo, hi);
          });
        }
      } else {
        for (int g = 0; g < group; ++g) {
          const float* r = row(j, g);
          float* oh = tile[static_cast<std::size_t>(j)].out + static_cast<std::size_t>(h0 + g) * hd;
          by_source(t0, t1, raw_from, values, raw_values, [&](int lo, int hi, const float* v) {
            for (int t = lo; t < hi; ++t) {
              const float w = r[t];
              if (w == 0.0f) continue;
              const float* vh = v + static_cast<std::size_t>(t) * hd;
#pragma omp simd
              for (int i = 0; i < hd; ++i) oh[i] += w * vh[i];
            }
          });
        }
      }
    }
  }
}

auto* attend_decoded_for(int hd) {
  return with_head_dim(hd, []<int HD>() { return &attend_decoded_tile<HD>; });
}

}  // namespace

void paged_attention_decoded_queries(int layer, const AttentionShape& shape,
                                     std::span<const AttentionQuery> queries,
                                     std::vector<float>& scratch, const DecodedKv& kv) {
  paged_attention_decoded_queries(layer, shape, queries, scratch, DecodedRead{&kv});
}

void paged_attention_decoded_queries(int layer, const AttentionShape& shape,
                                     std::span<const AttentionQuery> queries,
                                     std::vector<float>& scratch, const DecodedRead& read) {
  for (const AttentionQuery& a : queries) {
    if (a.view.num_slots > read.kv->n) {
      throw InternalError("paged_attention_decoded_queries",
                          "a view has " + std::to_string(a.view.num_slots) + " slots, " +
                              std::to_string(read.kv->n) + " were decoded");
    }
  }
  if ((read.key_group > 0 || read.value_group > 0) && read.raw == nullptr)
    throw InternalError("paged_attention_decoded_queries", "staged groups without written rows");
  auto* attend = attend_decoded_for(shape.head_dim);
  // Up to kBatch queries at a time: their weights [n_heads][num_slots] each in scratch, one after
  // another (notify_observer's layout), and their tiles times the KV heads shared by the threads.
  constexpr std::size_t kBatch = 8 * kQueryTile;
  for (std::size_t b0 = 0; b0 < queries.size(); b0 += kBatch) {
    const std::span<const AttentionQuery> batch =
        queries.subspan(b0, std::min(kBatch, queries.size() - b0));
    std::vector<std::size_t> offset(batch.size() + 1, 0);
    [[maybe_unused]] long work = 0;  // only OpenMP's `if` reads it
    for (std::size_t j = 0; j < batch.size(); ++j) {
      const int n = batch[j].view.num_slots;
      offset[j + 1] = offset[j] + static_cast<std::size_t>(shape.n_heads) * n;
      work += static_cast<long>(n) * shape.n_heads * shape.head_dim;
    }
    if (scratch.size() < offset.back()) scratch.resize(offset.back());
    const int tiles = static_cast<int>((batch.size() + kQueryTile - 1) / kQueryTile);
    const int items = tiles * shape.kv_heads;
#pragma omp parallel for schedule(static) if (work >= kParallelThreshold)
    for (int item = 0; item < items; ++item) {
      const int kvh = item % shape.kv_heads;
      const std::size_t t0 = static_cast<std::size_t>(item / shape.kv_heads) * kQueryTile;
      const std::span<const AttentionQuery> tile =
          batch.subspan(t0, std::min<std::size_t>(kQueryTile, batch.size() - t0));
      float* att[kQueryTile];
      for (std::size_t j = 0; j < tile.size(); ++j) att[j] = scratch.data() + offset[t0 + j];
      attend(layer, shape, kvh, tile, att, read);
    }
    for (std::size_t j = 0; j < batch.size(); ++j) {
      notify_observer(batch[j].observer, layer, shape.n_heads, batch[j].query_pos,
                      batch[j].view.num_slots, scratch.data() + offset[j]);
    }
  }
}

}  // namespace kvscope::cpu

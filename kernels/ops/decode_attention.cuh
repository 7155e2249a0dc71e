// Decode attention for the GPU's bandwidth (flash-decoding): the same function as
// paged_attention.cuh's kernels, over the same pools, formats, live maps, KIVI open groups and
// capture, laid out so that the K/V bytes are read once, coalesced, by enough blocks to fill the
// device.
//
// Block (g, s) of query i attends with every query head of KV head g's group (GQA: the group's
// K/V rows are read once for all of them) over the split [s * chunk, (s + 1) * chunk) of the
// query's slots, in three phases over shared memory:
//   1. scores: a token's row is read by head_dim / 8 lanes, 8 values each (16-byte loads for
//      fp16 / bf16, 8-byte for int8 / FP8, 2 x 16 for fp32; other formats value by value),
//      dotted with each query head and summed across the token's lanes by shuffles;
//   2. each head's maximum over the split, e^(s - max) and their sum, one warp per head;
//   3. values: the lanes of phase 1 read V the same way and sum e * v for kDecodeHeadBlock heads
//      at a time, and the token groups' sums are added in shared memory.
// It writes the split's unnormalized output with its maximum and sum (and, capturing, the e^(s -
// max) of each slot); decode_reduce_kernel rescales and combines the splits with
// paged_attention.cuh's combine_splits. The chunk is chosen per launch so that there are enough
// blocks (decode_chunk).
//
// Covered: head_dim 8, 16, 32, 64 or 128, at most kDecodeMaxGroup (4) query heads per KV head, and
// K/V in fp32, fp16, bf16, int8 or FP8 (decode_covers); the CUDA backend runs paged_attention.cuh's
// kernels for anything else (int4, int2, KIVI, other shapes). Evicted slots (the live map) are
// skipped as there.
// CPU twin: cpu::paged_attention (tests: DeviceOps.*, DeviceBackend.*).
#pragma once

#include "kernels/common/kv_formats.cuh"
#include "kernels/common/reduce.cuh"
#include "kernels/ops/paged_attention.cuh"

KVS_KERNELS_BEGIN

constexpr int kDecodeThreads = 128;
constexpr int kDecodeMaxGroup = 4;
constexpr int kDecodeMaxChunk = 512;
constexpr int kDecodeHeadBlock = 4;  // query heads whose value sums one lane holds at a time

// Whether the decode kernels read format `code` (the per-token formats whose values are whole
// bytes: fp32, fp16, bf16, int8 and FP8); the packed ones and KIVI take paged_attention.cuh's.
KVS_HOST_DEVICE bool decode_reads(int code) {
  return code == kKvF32 || code == kKvF16 || code == kKvBF16 || code == kKvInt8 ||
         code == kKvE4M3 || code == kKvE5M2;
}

// Whether the decode kernels take this shape and these K and V formats.
KVS_HOST_DEVICE bool decode_covers(int n_heads, int kv_heads, int head_dim, int k_code,
                                   int v_code) {
  return kv_heads > 0 && n_heads % kv_heads == 0 && n_heads / kv_heads <= kDecodeMaxGroup &&
         (head_dim == 8 || head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128) &&
         decode_reads(k_code) && decode_reads(v_code);
}

// Slots per split: about 1,024 blocks for the launch's rows (every query's slots of every KV
// head), a multiple of 32 in [64, kDecodeMaxChunk].
inline int decode_chunk(int max_slots, int kv_heads, int n_queries) {
  const long rows = static_cast<long>(max_slots) * kv_heads * n_queries;
  long chunk = (rows / 1024 + 31) / 32 * 32;
  if (chunk < 64) chunk = 64;
  if (chunk > kDecodeMaxChunk) chunk = kDecodeMaxChunk;
  return static_cast<int>(chunk);
}

// 16 (8) bytes at p, which is 16- (8-) byte aligned, as four (two) 32-bit words.
KVS_DEVICE void load_words4(const unsigned char* p, std::uint32_t* w) {
#ifdef __CUDACC__
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  w[0] = v.x;
  w[1] = v.y;
  w[2] = v.z;
  w[3] = v.w;
#else
  memcpy(w, p, 16);
#endif
}
KVS_DEVICE void load_words2(const unsigned char* p, std::uint32_t* w) {
#ifdef __CUDACC__
  const uint2 v = *reinterpret_cast<const uint2*>(p);
  w[0] = v.x;
  w[1] = v.y;
#else
  memcpy(w, p, 8);
#endif
}
KVS_DEVICE bool aligned_to(const unsigned char* p, unsigned bytes) {
  return (reinterpret_cast<std::uintptr_t>(p) & (bytes - 1u)) == 0;
}

// Slot t's values d0 .. d0 + 7 of KV head g as stored, in a format decode_reads: up to 32 bytes of
// codes and, for int8 / FP8, the token's scale. Fetched in one step and decoded in another, so
// that a lane can have several rows' loads in flight before it needs the first.
struct RawEight {
  std::uint32_t w[8];  // int8 / FP8: the codes in w[0..1], the scale's 16 bits in w[2]
};

// The row's bytes: one or two vector loads where the row is aligned for them, else value by
// value. tbl: the block table's entries from logical block `first` on (shared memory); bs_shift:
// log2 of the block size when it is a power of two, else -1. what and key: the memory trace's
// (the codes as `what`, a scale as what + 1; key + j for the j-th load of the row).
KVS_DEVICE void fetch_eight(const PagedKv& kv, const KvTiles& tiles, const int* tbl, int first,
                            int bs_shift, int t, int g, int d0, RawEight& r, unsigned what,
                            std::uint64_t key) {
  const int kv_dim = kv.kv_heads * kv.head_dim;
  const int logical = bs_shift >= 0 ? t >> bs_shift : t / kv.block_size;
  const int block = tbl[logical - first], offset = t - logical * kv.block_size;
  const unsigned char* tile = tiles.base + static_cast<long>(block) * tiles.tile_bytes;
  const long i = static_cast<long>(offset) * kv_dim + g * kv.head_dim + d0;
  // The row's loads for the memory trace: n loads of `bytes` bytes each from p on. The vector
  // loads (keys key + 0, 1) and the value-by-value ones (key + 16 ...) are different
  // instructions: lanes of one warp may take either path when rows are unaligned.
  const auto traced = [&](const unsigned char* p, int n, unsigned bytes) {
    const unsigned path = n > 2 ? 16u : 0u;
    for (int j = 0; j < n; ++j)
      simt::trace_load(p + j * bytes, bytes, what, block, key + path + static_cast<unsigned>(j));
  };
  if (tiles.code == kKvF32) {
    const unsigned char* p = tile + i * 4;
    if (aligned_to(p, 16)) {
      traced(p, 2, 16);
      load_words4(p, r.w);
      load_words4(p + 16, r.w + 4);
    } else {
      traced(p, 8, 4);
      KVS_UNROLL
      for (int j = 0; j < 8; ++j) r.w[j] = reinterpret_cast<const std::uint32_t*>(p)[j];
    }
  } else if (tiles.code == kKvF16 || tiles.code == kKvBF16) {
    const unsigned char* p = tile + i * 2;
    if (aligned_to(p, 16)) {
      traced(p, 1, 16);
      load_words4(p, r.w);
    } else {
      traced(p, 8, 2);
      const auto* u = reinterpret_cast<const std::uint16_t*>(p);
      KVS_UNROLL
      for (int j = 0; j < 4; ++j)
        r.w[j] =
            static_cast<std::uint32_t>(u[2 * j]) | (static_cast<std::uint32_t>(u[2 * j + 1]) << 16);
    }
  } else {  // int8, FP8: 1-byte codes and a 16-bit scale per token per KV head
    const unsigned char* p = tile + i;
    if (aligned_to(p, 8)) {
      traced(p, 1, 8);
      load_words2(p, r.w);
    } else {
      traced(p, 8, 1);
      KVS_UNROLL
      for (int j = 0; j < 2; ++j)
        r.w[j] = static_cast<std::uint32_t>(p[4 * j]) |
                 (static_cast<std::uint32_t>(p[4 * j + 1]) << 8) |
                 (static_cast<std::uint32_t>(p[4 * j + 2]) << 16) |
                 (static_cast<std::uint32_t>(p[4 * j + 3]) << 24);
    }
    const auto* scales =
        reinterpret_cast<const std::uint16_t*>(tile + static_cast<long>(kv.block_size) * kv_dim);
    simt::trace_load(scales + static_cast<long>(offset) * kv.kv_heads + g, 2, what + 1, block,
                     key + 8u);
    r.w[2] = scales[static_cast<long>(offset) * kv.kv_heads + g];
  }
}

// x[j] = the row's value d0 + j, decoded as kv_load decodes it.
KVS_DEVICE void decode_eight(int code, const RawEight& r, float* x) {
  if (code == kKvF32) {
    KVS_UNROLL
    for (int j = 0; j < 8; ++j) x[j] = bits_float(r.w[j]);
  } else if (code == kKvF16 || code == kKvBF16) {
    KVS_UNROLL
    for (int j = 0; j < 8; ++j) {
      const auto h = static_cast<std::uint16_t>(r.w[j / 2] >> (16 * (j % 2)));
      x[j] = code == kKvF16 ? f16_value(h) : bf16_value(h);
    }
  } else {
    const auto bits = static_cast<std::uint16_t>(r.w[2]);
    const float scale = code == kKvInt8 ? f16_value(bits) : bf16_value(bits);
    KVS_UNROLL
    for (int j = 0; j < 8; ++j) {
      const unsigned b = (r.w[j / 4] >> (8 * (j % 4))) & 0xFFu;
      x[j] = code == kKvInt8 ? static_cast<float>(static_cast<signed char>(b)) * scale
                             : fp8_decode(b, code == kKvE4M3) * scale;
    }
  }
}

// A row that is not read (past the split, or evicted): zeros in every format.
KVS_DEVICE void zero_eight(RawEight& r) {
  KVS_UNROLL
  for (int j = 0; j < 8; ++j) r.w[j] = 0;
}

// The shared memory one block uses (floats): the group's queries [group][head_dim], the split's
// scores [group][chunk], and the value phase's sums per token group [kDecodeThreads * 8 /
// head_dim][kDecodeHeadBlock][head_dim]; then the split's block table entries (ints).
inline std::size_t decode_shared_bytes(int group, int head_dim, int chunk) {
  return sizeof(float) * static_cast<std::size_t>(group * head_dim + group * chunk +
                                                  kDecodeThreads * 8 * kDecodeHeadBlock) +
         sizeof(int) * static_cast<std::size_t>(chunk + 1);
}

// One block's split (see the top of this file). q: this query's [n_heads][head_dim]; part, m, l:
// the launch's [queries][n_heads][splits][head_dim], [queries][n_heads][splits], this query's
// rows from row0 (its index times n_heads) on; its captured rows [n_heads][num_slots] from
// weights + w_off, or none when weights is nullptr or w_off < 0. (The launch's pointers and an
// offset, not this query's pointers: fewer registers held through the loops.)
KVS_DEVICE void decode_split(const PagedKv& kv, const float* q, int n_heads, int g, int s,
                             int splits, int chunk, float* part, float* m, float* l, long row0,
                             float* weights, long w_off) {
  KVS_SHARED_ARRAY(float, stats, 2 * kDecodeMaxGroup);
  KVS_DYNAMIC_SHARED(float, smem);
  const int hd = kv.head_dim, group = n_heads / kv.kv_heads, h0 = g * group;
  float* q_s = smem;
  float* sc = q_s + group * hd;
  float* red = sc + group * chunk;
  const int tid = static_cast<int>(simt::tid_x()), lane = tid % 32, warp = tid / 32;
  const int warps = kDecodeThreads / 32;
  const int t0 = s * chunk, t1 = t0 + chunk < kv.num_slots ? t0 + chunk : kv.num_slots;
  const int n = t1 > t0 ? t1 - t0 : 0;
  trace_block_role(kv, static_cast<int>(row0 / n_heads), g, s, h0, group, t0, t1 > t0 ? t1 : t0);
  const float inv_sqrt = 1.0f / sqrtf(static_cast<float>(hd));
  int bs_shift = -1;
  for (int b = 0; b < 30; ++b)
    if ((1 << b) == kv.block_size) bs_shift = b;
  // The split's block table entries, once, to shared memory: a row's address then waits on one
  // load from device memory, not two.
  int* tbl = reinterpret_cast<int*>(red + kDecodeThreads * 8 * kDecodeHeadBlock);
  const int first = bs_shift >= 0 ? t0 >> bs_shift : t0 / kv.block_size;
  const int entries = n == 0 ? 0 : (t1 - 1) / kv.block_size - first + 1;
  for (int i = tid; i < entries; i += kDecodeThreads) {
    simt::trace_load(kv.block_table + first + i, 4, simt::kTraceTable, -1,
                     simt::trace_key(3, i / kDecodeThreads, 0));
    tbl[i] = kv.block_table[first + i];
  }
  for (int i = tid; i < group * hd; i += kDecodeThreads)
    q_s[i] = q[static_cast<long>(h0) * hd + i] * inv_sqrt;
  simt::sync_block();

  // 1. Scores: `lanes` lanes per token, 8 values each; `per_warp` tokens per warp step, two
  // steps' rows fetched before either is used.
  const int lanes = hd / 8, per_warp = 32 / lanes, step = warps * per_warp;
  const int sub = lane / lanes, li = lane % lanes, d0 = li * 8;
  const auto score = [&](const RawEight& r, int i, bool live) {  // every lane calls it
    float x[8];
    decode_eight(kv.k.code, r, x);
    float dot[kDecodeMaxGroup];
    KVS_UNROLL
    for (int h = 0; h < kDecodeMaxGroup; ++h) {
      dot[h] = 0.0f;
      if (h < group) {
        const float* qh = q_s + h * hd + d0;
        KVS_UNROLL
        for (int j = 0; j < 8; ++j) dot[h] += qh[j] * x[j];
      }
    }
    for (int o = lanes / 2; o > 0; o >>= 1) {
      KVS_UNROLL
      for (int h = 0; h < kDecodeMaxGroup; ++h)
        if (h < group) dot[h] += simt::shfl_xor(dot[h], o);
    }
    if (i < n && li == 0) {
      KVS_UNROLL
      for (int h = 0; h < kDecodeMaxGroup; ++h)
        if (h < group) sc[h * chunk + i] = live ? dot[h] : -INFINITY;
    }
  };
  for (int base = warp * per_warp; base < n; base += 2 * step) {
    const int ia = base + sub, ib = ia + step;  // this lane's tokens, where < n
    const bool la = ia < n && slot_is_live(kv, t0 + ia);
    const bool lb = ib < n && slot_is_live(kv, t0 + ib);
    RawEight ra, rb;
    zero_eight(ra);
    zero_eight(rb);
    const long iter = (base - warp * per_warp) / (2 * step);  // the same for the warp's lanes
    if (la)
      fetch_eight(kv, kv.k, tbl, first, bs_shift, t0 + ia, g, d0, ra, simt::kTraceKCodes,
                  simt::trace_key(4, 2 * iter, 0));
    if (lb)
      fetch_eight(kv, kv.k, tbl, first, bs_shift, t0 + ib, g, d0, rb, simt::kTraceKCodes,
                  simt::trace_key(4, 2 * iter + 1, 0));
    score(ra, ia, la);
    score(rb, ib, lb);
  }
  simt::sync_block();

  // 2. Per head: the split's maximum, e = e^(score - max) in place, and their sum.
  for (int h = warp; h < group; h += warps) {
    float* row = sc + h * chunk;
    float mx = -INFINITY;
    for (int i = lane; i < n; i += 32) mx = fmaxf(mx, row[i]);
    mx = warp_reduce<true>(mx);
    float sum = 0.0f;
    for (int i = lane; i < n; i += 32) {
      const float e = mx == -INFINITY || row[i] == -INFINITY ? 0.0f : expf(row[i] - mx);
      row[i] = e;
      sum += e;
    }
    sum = warp_reduce<false>(sum);
    if (lane == 0) {
      stats[h] = mx;
      stats[kDecodeMaxGroup + h] = sum;
    }
    if (weights != nullptr && w_off >= 0) {
      float* w = weights + w_off + static_cast<long>(h0 + h) * kv.num_slots + t0;
      for (int i = lane; i < n; i += 32) w[i] = row[i];
    }
  }
  simt::sync_block();

  // 3. Values, kDecodeHeadBlock heads at a time: each lane sums e * v over its tokens for the
  // 8 dimensions it read K for; then the token groups' sums are added in shared memory.
  for (int hb = 0; hb < group; hb += kDecodeHeadBlock) {
    float acc[kDecodeHeadBlock][8];
    KVS_UNROLL
    for (int hh = 0; hh < kDecodeHeadBlock; ++hh) {
      KVS_UNROLL
      for (int j = 0; j < 8; ++j) acc[hh][j] = 0.0f;
    }
    for (int base = warp * per_warp; base < n; base += warps * per_warp) {
      const int i = base + sub;
      if (i >= n || !slot_is_live(kv, t0 + i)) continue;  // no collective in this loop
      RawEight r;
      const long iter = (base - warp * per_warp) / (warps * per_warp);
      fetch_eight(kv, kv.v, tbl, first, bs_shift, t0 + i, g, d0, r, simt::kTraceVCodes,
                  simt::trace_key(5, hb * 65536L + iter, 0));
      float x[8];
      decode_eight(kv.v.code, r, x);
      KVS_UNROLL
      for (int hh = 0; hh < kDecodeHeadBlock; ++hh) {
        if (hb + hh >= group) continue;
        const float e = sc[(hb + hh) * chunk + i];
        KVS_UNROLL
        for (int j = 0; j < 8; ++j) acc[hh][j] += e * x[j];
      }
    }
    // The sums of token group tk (warp, sub) to red[tk][hh][head_dim]; then each output adds
    // its groups' (shared memory, not shuffles: cheap on the GPU once per split, and the
    // emulator pays a fiber switch per shuffled value).
    const int tk = warp * per_warp + sub, groups_of_tokens = warps * per_warp;
    KVS_UNROLL
    for (int hh = 0; hh < kDecodeHeadBlock; ++hh) {
      KVS_UNROLL
      for (int j = 0; j < 8; ++j) red[(tk * kDecodeHeadBlock + hh) * hd + d0 + j] = acc[hh][j];
    }
    simt::sync_block();
    for (int idx = tid; idx < kDecodeHeadBlock * hd; idx += kDecodeThreads) {
      const int hh = idx / hd, d = idx % hd;
      if (hb + hh >= group) continue;
      float total = 0.0f;
      for (int k = 0; k < groups_of_tokens; ++k) total += red[(k * kDecodeHeadBlock + hh) * hd + d];
      const long hs = (row0 + h0 + hb + hh) * splits + s;
      part[hs * hd + d] = total;
      if (d == 0) {
        m[hs] = stats[hb + hh];
        l[hs] = stats[kDecodeMaxGroup + hb + hh];
      }
    }
    simt::sync_block();  // every sum is read before the next head block writes red
  }
}

// One query: block (g + kv_heads * s) of a grid of kv_heads * splits.
KVS_GLOBAL void decode_split_kernel(float* part, float* m, float* l, const float* q, PagedKv kv,
                                    int n_heads, int chunk, float* weights) {
  const int b = static_cast<int>(simt::bid_x());
  const int splits = static_cast<int>(simt::gdim_x()) / kv.kv_heads;
  decode_split(kv, q, n_heads, b % kv.kv_heads, b / kv.kv_heads, splits, chunk, part, m, l, 0,
               weights, 0);
}

// Many queries (a step): block (g + kv_heads * s, i); splits past a query's slots are empty.
KVS_GLOBAL void decode_split_batch_kernel(float* part, float* m, float* l, const float* q,
                                          PagedBatch pb, int n_heads, int chunk, float* weights) {
  const int b = static_cast<int>(simt::bid_x()), i = static_cast<int>(simt::bid_y());
  const int splits = static_cast<int>(simt::gdim_x()) / pb.kv_heads;
  const PagedKv kv = batch_query(pb, i);
  decode_split(kv, q + static_cast<long>(i) * n_heads * pb.head_dim, n_heads, b % pb.kv_heads,
               b / pb.kv_heads, splits, chunk, part, m, l, static_cast<long>(i) * n_heads, weights,
               pb.meta[kBatchMeta * i + 3]);
}

// Block (h, i): head h of query i, its splits combined (combine_splits). meta: the batch's rows
// (num_slots and capture offset of query i), or nullptr for one query of num_slots slots captured
// into `weights`.
KVS_GLOBAL void decode_reduce_kernel(float* out, const float* part, const float* m, const float* l,
                                     int n_heads, int splits, int head_dim, int chunk,
                                     const int* meta, int num_slots, float* weights) {
  const int h = static_cast<int>(simt::bid_x()), i = static_cast<int>(simt::bid_y());
  const int slots = meta != nullptr ? meta[kBatchMeta * i + 1] : num_slots;
  float* w = weights;
  if (meta != nullptr)
    w = weights != nullptr && meta[kBatchMeta * i + 3] >= 0 ? weights + meta[kBatchMeta * i + 3]
                                                            : nullptr;
  const long row = static_cast<long>(i) * n_heads + h, h0 = row * splits;
  combine_splits(out + row * head_dim, part + h0 * head_dim, m + h0, l + h0,
                 (slots + chunk - 1) / chunk, head_dim, slots, chunk,
                 w != nullptr ? w + static_cast<long>(h) * slots : nullptr);
}

// Floats of device workspace for n_queries queries of at most max_slots slots.
inline long decode_workspace_floats(int n_queries, int n_heads, int kv_heads, int head_dim,
                                    int max_slots) {
  const int chunk = decode_chunk(max_slots, kv_heads, n_queries);
  return split_workspace_floats(n_heads * n_queries, head_dim, max_slots, chunk);
}

// One query over kv (decode_covers its shape): `work` holds decode_workspace_floats(1, ...).
inline void launch_decode_attention(float* out, const float* q, const PagedKv& kv, int n_heads,
                                    float* work, float* weights = nullptr) {
  const int chunk = decode_chunk(kv.num_slots, kv.kv_heads, 1);
  const int splits = (kv.num_slots + chunk - 1) / chunk;
  const auto [part, m, l] = split_parts(work, n_heads, splits, kv.head_dim);
  KVS_LAUNCH(decode_split_kernel, simt::Dim3(static_cast<unsigned>(kv.kv_heads * splits)),
             simt::Dim3(static_cast<unsigned>(kDecodeThreads)),
             decode_shared_bytes(n_heads / kv.kv_heads, kv.head_dim, chunk), part, m, l, q, kv,
             n_heads, chunk, weights);
  KVS_LAUNCH(decode_reduce_kernel, simt::Dim3(static_cast<unsigned>(n_heads), 1u),
             simt::Dim3(static_cast<unsigned>(kDecodeThreads)), 0, out, part, m, l, n_heads, splits,
             kv.head_dim, chunk, static_cast<const int*>(nullptr), kv.num_slots, weights);
}

// n_queries queries of a step, every num_slots at most max_slots (any length):
// `work` holds decode_workspace_floats(n_queries, ...).
inline void launch_decode_attention_batch(float* out, const float* q, const PagedBatch& b,
                                          int n_queries, int n_heads, int max_slots, float* work,
                                          float* weights = nullptr) {
  const int chunk = decode_chunk(max_slots, b.kv_heads, n_queries);
  const int splits = (max_slots + chunk - 1) / chunk;
  const auto [part, m, l] = split_parts(work, n_heads * n_queries, splits, b.head_dim);
  KVS_LAUNCH(
      decode_split_batch_kernel,
      simt::Dim3(static_cast<unsigned>(b.kv_heads * splits), static_cast<unsigned>(n_queries)),
      simt::Dim3(static_cast<unsigned>(kDecodeThreads)),
      decode_shared_bytes(n_heads / b.kv_heads, b.head_dim, chunk), part, m, l, q, b, n_heads,
      chunk, weights);
  KVS_LAUNCH(decode_reduce_kernel,
             simt::Dim3(static_cast<unsigned>(n_heads), static_cast<unsigned>(n_queries)),
             simt::Dim3(static_cast<unsigned>(kDecodeThreads)), 0, out, part, m, l, n_heads, splits,
             b.head_dim, chunk, b.meta, 0, weights);
}

KVS_KERNELS_END

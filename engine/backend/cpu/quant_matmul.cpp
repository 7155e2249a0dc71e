// See quant_matmul.h for the arithmetic every implementation follows. This file is compiled with
// -ffp-contract=off and without -fassociative-math (engine/CMakeLists.txt), so the compiler keeps
// each float operation as written; the SIMD paths are compiled for their instruction sets with
// target attributes and only ever called after a CPU check. They exist on x86 only: elsewhere
// (the browser build's WebAssembly) the portable path is the one there is.
#include "engine/backend/cpu/quant_matmul.h"

#if defined(__x86_64__) || defined(__i386__)
#define KVSCOPE_QUANT_X86 1
#include <cpuid.h>
#include <immintrin.h>
#include <unistd.h>
#endif
#if defined(__wasm_simd128__)
#include <wasm_simd128.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/common/error.h"

// GCC 12's AVX-512 intrinsics start some results from a deliberately undefined register
// (`__m512i __Y = __Y;`), which -W(maybe-)uninitialized reports wherever they are inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace kvscope::cpu {
namespace {

constexpr int kLanes = 8;  // runs of 4 elements per block

// ggml's block layouts (ggml-common.h): Q4_0 = f16 d, 16 bytes of nibbles; Q4_1 = f16 d, f16 m,
// 16 bytes of nibbles; Q8_0 = f16 d, 32 int8. Nibble j (< 16) is element j in its low half and
// element j + 16 in its high half.
constexpr int block_bytes(GgmlType t) {
  return t == GgmlType::kQ4_0 ? 18 : t == GgmlType::kQ4_1 ? 20 : 34;
}
constexpr int quants_offset(GgmlType t) {
  return t == GgmlType::kQ4_1 ? 4 : 2;
}

// Calls fn.template operator()<T>() with T the native block type `type` names (one of the three
// has_native_matmul() accepts): each kernel is instantiated per type.
template <class Fn>
void with_block_type(GgmlType type, Fn&& fn) {
  switch (type) {
    case GgmlType::kQ4_0:
      return fn.template operator()<GgmlType::kQ4_0>();
    case GgmlType::kQ4_1:
      return fn.template operator()<GgmlType::kQ4_1>();
    default:
      return fn.template operator()<GgmlType::kQ8_0>();
  }
}

inline std::uint16_t load_u16(const std::byte* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

constexpr int kGroups = 4;              // independent accumulator chains
constexpr int kAcc = kGroups * kLanes;  // accumulators per (weight row, activation row)

// The 32 accumulators (the products' and the mins', added lane by lane) summed in one fixed tree:
// a[i] + a[i + 16], then h[i] + h[i + 8], then s[i] + s[i + 4], then (u0 + u1) + (u2 + u3). The
// SIMD paths do the same additions as vector halves.
float reduce32(const float* acc, const float* mins) {
  float h[16], s[8], u[4];
  for (int i = 0; i < 16; ++i) h[i] = (acc[i] + mins[i]) + (acc[i + 16] + mins[i + 16]);
  for (int i = 0; i < 8; ++i) s[i] = h[i] + h[i + 8];
  for (int i = 0; i < 4; ++i) u[i] = s[i] + s[i + 4];
  return (u[0] + u[1]) + (u[2] + u[3]);
}

// Activation row t: its int8 values, its blocks' scales and its lanes' d * sum (QuantizedActs).
struct ActRow {
  const std::int8_t* q;
  const float* d;
  const float* lane_f;
};
inline ActRow act_row(const QuantizedActs& a, int t) {
  const std::size_t nb = static_cast<std::size_t>(a.n / kQuantBlock);
  return {a.q.data() + static_cast<std::size_t>(t) * a.n, a.d.data() + t * nb,
          a.lane_f.data() + t * nb * kLanes};
}

// ---- Portable reference ----------------------------------------------------------------------

// The block's 32 weights as the integers the dot product multiplies (Q4_0's zero point 8 taken
// off, Q4_1's min handled separately).
template <GgmlType T>
void block_ints(const std::byte* blk, std::int32_t w[kQuantBlock]) {
  const auto* qs = reinterpret_cast<const std::uint8_t*>(blk + quants_offset(T));
  if constexpr (T == GgmlType::kQ8_0) {
    for (int e = 0; e < kQuantBlock; ++e) w[e] = static_cast<std::int8_t>(qs[e]);
  } else {
    constexpr int zero = T == GgmlType::kQ4_0 ? 8 : 0;
    for (int j = 0; j < 16; ++j) {
      w[j] = (qs[j] & 0x0F) - zero;
      w[j + 16] = (qs[j] >> 4) - zero;
    }
  }
}

// One weight row against one activation row, one type per instantiation, the eight lanes' integer
// sums before their float steps (loops the compiler can vectorize). The arithmetic is the
// reference's: exact integer sums, then per lane a product and a sum into its slot, in order.
template <GgmlType T>
float dot_portable(const std::byte* row, int nb, const QuantizedActs& a, int t) {
  constexpr int bb = block_bytes(T);
  std::int32_t wi[kQuantBlock], prod[kQuantBlock], lane[kLanes];
  const auto [xq, dx, lf] = act_row(a, t);
  float acc[kAcc] = {}, mins[kAcc] = {};
  for (int b = 0; b < nb; ++b) {
    const std::byte* blk = row + static_cast<std::ptrdiff_t>(b) * bb;
    block_ints<T>(blk, wi);
    const std::int8_t* xb = xq + static_cast<std::ptrdiff_t>(b) * kQuantBlock;
    for (int e = 0; e < kQuantBlock; ++e) prod[e] = wi[e] * xb[e];
    for (int i = 0; i < kLanes; ++i)
      lane[i] = (prod[4 * i] + prod[4 * i + 1]) + (prod[4 * i + 2] + prod[4 * i + 3]);
    const float dd = fp16_to_fp32(load_u16(blk)) * dx[b];
    float* acc_g = acc + (b % kGroups) * kLanes;
    for (int i = 0; i < kLanes; ++i) acc_g[i] = acc_g[i] + static_cast<float>(lane[i]) * dd;
    if constexpr (T == GgmlType::kQ4_1) {
      const float mw = fp16_to_fp32(load_u16(blk + 2));
      float* mins_g = mins + (b % kGroups) * kLanes;
      for (int i = 0; i < kLanes; ++i) mins_g[i] = mins_g[i] + mw * lf[b * kLanes + i];
    }
  }
  return reduce32(acc, mins);
}

template <GgmlType T>
void rows_portable(const std::byte* w, std::int64_t row_bytes, long r0, long r1,
                   const QuantizedActs& a, float* out, long ldo) {
  const int nb = a.n / kQuantBlock;
  for (long r = r0; r < r1; ++r)
    for (int t = 0; t < a.m; ++t) out[t * ldo + r] = dot_portable<T>(w + r * row_bytes, nb, a, t);
}

void rows_scalar(GgmlType type, const std::byte* w, std::int64_t row_bytes, long r0, long r1,
                 const QuantizedActs& a, float* out, long ldo) {
  with_block_type(type, [&]<GgmlType T>() { rows_portable<T>(w, row_bytes, r0, r1, a, out, ldo); });
}

#if defined(__wasm_simd128__)
// ---- WebAssembly SIMD128 ---------------------------------------------------------------------

// The browser build's path (-msimd128): the reference's exact integer sums and its float
// products and sums, four lanes at a time. fp16 scales are read through a table (WebAssembly has
// no half-precision conversion): fp16_to_fp32's floats. A block's weights are unpacked once for
// up to kTile activation rows (prefill), not once per row.

// 16 int8 elements as two int16 vectors: the even ones (0, 2, .., 14) and the odd ones.
inline void even_odd16(v128_t v, v128_t& even, v128_t& odd) {
  even = wasm_i16x8_shr(wasm_i16x8_shl(v, 8), 8);
  odd = wasm_i16x8_shr(v, 8);
}

// A block's 32 elements as four int16 vectors: even and odd of elements 0-15, then of 16-31.
struct Split32 {
  v128_t even_lo, odd_lo, even_hi, odd_hi;
};

// The eight lane sums (4 products each, elements 4i..4i+3) of a block, as two vectors: with both
// sides split even/odd, one i32x4.dot_i16x8_s sums elements 4i and 4i+2 and another 4i+1 and
// 4i+3. The reference adds (p0+p1)+(p2+p3); integer sums are exact in any order.
inline void lane_sums32(const Split32& w, const Split32& x, v128_t& l0, v128_t& l1) {
  l0 = wasm_i32x4_add(wasm_i32x4_dot_i16x8(w.even_lo, x.even_lo),
                      wasm_i32x4_dot_i16x8(w.odd_lo, x.odd_lo));
  l1 = wasm_i32x4_add(wasm_i32x4_dot_i16x8(w.even_hi, x.even_hi),
                      wasm_i32x4_dot_i16x8(w.odd_hi, x.odd_hi));
}

// A weight block's elements, split even/odd as int16.
template <GgmlType T>
inline Split32 unpack_split(const std::byte* qs) {
  Split32 w;
  if constexpr (T == GgmlType::kQ8_0) {
    even_odd16(wasm_v128_load(qs), w.even_lo, w.odd_lo);
    even_odd16(wasm_v128_load(qs + 16), w.even_hi, w.odd_hi);
  } else {
    // Byte j holds element j (low nibble) and element j + 16 (high nibble); as int16 lanes,
    // lane k holds bytes 2k and 2k + 1.
    const v128_t v = wasm_v128_load(qs);
    const v128_t nibble = wasm_i16x8_splat(0x000F);
    w.even_lo = wasm_v128_and(v, nibble);
    w.odd_lo = wasm_v128_and(wasm_u16x8_shr(v, 8), nibble);
    w.even_hi = wasm_v128_and(wasm_u16x8_shr(v, 4), nibble);
    w.odd_hi = wasm_u16x8_shr(v, 12);
    if constexpr (T == GgmlType::kQ4_0) {
      const v128_t eight = wasm_i16x8_splat(8);
      w.even_lo = wasm_i16x8_sub(w.even_lo, eight);
      w.odd_lo = wasm_i16x8_sub(w.odd_lo, eight);
      w.even_hi = wasm_i16x8_sub(w.even_hi, eight);
      w.odd_hi = wasm_i16x8_sub(w.odd_hi, eight);
    }
  }
  return w;
}

// Every fp16 value as a float: fp16_to_fp32's bits, one load.
const float* half_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (std::uint32_t h = 0; h < 65536; ++h) t[h] = fp16_to_fp32(static_cast<std::uint16_t>(h));
    return t;
  }();
  return table.data();
}

// Block b of a weight row (its accumulator group G = b % kGroups, known when compiled, so the
// accumulators stay in registers) against TN activation rows.
template <GgmlType T, int TN, int G>
inline void block_wasm(const std::byte* blk, int b, const Split32* const* x16, const ActRow* x,
                       const float* half, v128_t (&acc)[TN][kGroups][2],
                       v128_t (&mins)[TN][kGroups][2]) {
  const Split32 wb = unpack_split<T>(blk + quants_offset(T));
  const float dw = half[load_u16(blk)];
  for (int i = 0; i < TN; ++i) {
    v128_t l0, l1;
    lane_sums32(wb, x16[i][b], l0, l1);
    const v128_t dd = wasm_f32x4_splat(dw * x[i].d[b]);
    acc[i][G][0] = wasm_f32x4_add(acc[i][G][0], wasm_f32x4_mul(wasm_f32x4_convert_i32x4(l0), dd));
    acc[i][G][1] = wasm_f32x4_add(acc[i][G][1], wasm_f32x4_mul(wasm_f32x4_convert_i32x4(l1), dd));
    if constexpr (T == GgmlType::kQ4_1) {
      const v128_t mw = wasm_f32x4_splat(half[load_u16(blk + 2)]);  // Q4_1's min
      const float* lf = x[i].lane_f + b * kLanes;
      mins[i][G][0] = wasm_f32x4_add(mins[i][G][0], wasm_f32x4_mul(mw, wasm_v128_load(lf)));
      mins[i][G][1] = wasm_f32x4_add(mins[i][G][1], wasm_f32x4_mul(mw, wasm_v128_load(lf + 4)));
    }
  }
}

// Weight rows [r0, r1) against activation rows [t0, t0 + TN).
template <GgmlType T, int TN>
void tile_wasm(const std::byte* w, std::int64_t row_bytes, long r0, long r1, const QuantizedActs& a,
               const std::vector<Split32>& split, int t0, float* out, long ldo) {
  const int nb = a.n / kQuantBlock;
  constexpr int bb = block_bytes(T);
  const float* half = half_table();
  ActRow x[TN];
  const Split32* x16[TN];
  for (int i = 0; i < TN; ++i) {
    x[i] = act_row(a, t0 + i);
    x16[i] = split.data() + static_cast<std::size_t>(t0 + i) * nb;
  }
  for (long r = r0; r < r1; ++r) {
    const std::byte* row = w + r * row_bytes;
    v128_t acc[TN][kGroups][2], mins[TN][kGroups][2];
    for (int i = 0; i < TN; ++i)
      for (int g = 0; g < kGroups; ++g)
        acc[i][g][0] = acc[i][g][1] = mins[i][g][0] = mins[i][g][1] = wasm_f32x4_splat(0.0f);
    const auto at = [row](int b) { return row + static_cast<std::ptrdiff_t>(b) * bb; };
    int b = 0;
    for (; b + kGroups <= nb; b += kGroups) {
      static_assert(kGroups == 4);
      block_wasm<T, TN, 0>(at(b), b, x16, x, half, acc, mins);
      block_wasm<T, TN, 1>(at(b + 1), b + 1, x16, x, half, acc, mins);
      block_wasm<T, TN, 2>(at(b + 2), b + 2, x16, x, half, acc, mins);
      block_wasm<T, TN, 3>(at(b + 3), b + 3, x16, x, half, acc, mins);
    }
    if (b < nb) block_wasm<T, TN, 0>(at(b), b, x16, x, half, acc, mins);
    if (b + 1 < nb) block_wasm<T, TN, 1>(at(b + 1), b + 1, x16, x, half, acc, mins);
    if (b + 2 < nb) block_wasm<T, TN, 2>(at(b + 2), b + 2, x16, x, half, acc, mins);
    for (int i = 0; i < TN; ++i) {
      float accf[kAcc], minsf[kAcc];
      for (int g = 0; g < kGroups; ++g) {
        for (int h = 0; h < 2; ++h) {
          wasm_v128_store(accf + g * kLanes + 4 * h, acc[i][g][h]);
          wasm_v128_store(minsf + g * kLanes + 4 * h, mins[i][g][h]);
        }
      }
      out[(t0 + i) * ldo + r] = reduce32(accf, minsf);
    }
  }
}

template <GgmlType T>
void rows_wasm(const std::byte* w, std::int64_t row_bytes, long r0, long r1, const QuantizedActs& a,
               float* out, long ldo) {
  const int nb = a.n / kQuantBlock;
  // The activations split even/odd once per call, for every weight row to meet.
  thread_local std::vector<Split32> split;
  split.resize(static_cast<std::size_t>(a.m) * nb);
  for (int t = 0; t < a.m; ++t) {
    const std::int8_t* xq = act_row(a, t).q;
    for (int b = 0; b < nb; ++b) {
      Split32& x = split[static_cast<std::size_t>(t) * nb + b];
      even_odd16(wasm_v128_load(xq + b * kQuantBlock), x.even_lo, x.odd_lo);
      even_odd16(wasm_v128_load(xq + b * kQuantBlock + 16), x.even_hi, x.odd_hi);
    }
  }
  // A block's weights are unpacked once for up to four activation rows; the tiles of rows run
  // inside each set of weight rows that stays in cache (64 KiB of weights).
  const long set = std::max<long>(1, 65536 / row_bytes);
  for (long s0 = r0; s0 < r1; s0 += set) {
    const long s1 = std::min(r1, s0 + set);
    int t0 = 0;
    for (; t0 + 4 <= a.m; t0 += 4) tile_wasm<T, 4>(w, row_bytes, s0, s1, a, split, t0, out, ldo);
    switch (a.m - t0) {
      case 3:
        tile_wasm<T, 3>(w, row_bytes, s0, s1, a, split, t0, out, ldo);
        break;
      case 2:
        tile_wasm<T, 2>(w, row_bytes, s0, s1, a, split, t0, out, ldo);
        break;
      case 1:
        tile_wasm<T, 1>(w, row_bytes, s0, s1, a, split, t0, out, ldo);
        break;
      default:
        break;
    }
  }
}
#endif  // __wasm_simd128__

#if defined(KVSCOPE_QUANT_X86)
// ---- AVX2 ------------------------------------------------------------------------------------

#define KVSCOPE_AVX2 __attribute__((target("avx2,fma,f16c")))

KVSCOPE_AVX2 inline float half_avx(const std::byte* p) {
  return _cvtsh_ss(load_u16(p));
}

// The block's 32 weight bytes: nibbles 0..15 (unsigned) for Q4_0/Q4_1, int8 for Q8_0.
template <GgmlType T>
KVSCOPE_AVX2 inline __m256i weights_avx2(const std::byte* blk) {
  const std::byte* qs = blk + quants_offset(T);
  if constexpr (T == GgmlType::kQ8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
  } else {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m128i m4 = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), _mm_and_si128(raw, m4));
  }
}

// L[i] of one block (8 lanes) against activation bytes x.
template <GgmlType T>
KVSCOPE_AVX2 inline __m256i lanes_avx2(__m256i wq, const std::int8_t* x, const std::int32_t* lane) {
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (T == GgmlType::kQ8_0) {
    // |w| (unsigned) times x with w's sign: pairs stay within int16 (at most 2 * 128 * 127).
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(xv, wq));
    return _mm256_madd_epi16(p, ones);
  } else {
    // Nibbles 0..15 times int8: pairs stay within int16 (at most 2 * 15 * 127).
    const __m256i l = _mm256_madd_epi16(_mm256_maddubs_epi16(wq, xv), ones);
    if constexpr (T == GgmlType::kQ4_0) {
      const __m256i corr =
          _mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lane)), 3);
      return _mm256_sub_epi32(l, corr);
    } else {
      return l;
    }
  }
}

// reduce32's last steps on s[0..7]: s[i] + s[i + 4], then (u0 + u1) + (u2 + u3).
KVSCOPE_AVX2 inline float reduce8_avx(__m256 s) {
  const __m128 u = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  const __m128 pairs = _mm_add_ps(u, _mm_movehdup_ps(u));  // [u0 + u1, -, u2 + u3, -]
  return _mm_cvtss_f32(_mm_add_ss(pairs, _mm_movehl_ps(pairs, pairs)));
}

// A block of weights as the AVX2 loop multiplies it: weights_avx2's 32 bytes and the block's
// scale (and Q4_1's min) as floats.
struct alignas(32) BlockW {
  std::uint8_t wq[32];
  float dw;
  float mw;
};

// A weight row's blocks, unpacked once and then read from L1 by every activation row of a chunk
// (AVX2 makes one pass per activation row, so unpacked as it is read, a row's blocks were
// unpacked once per token).
template <GgmlType T>
KVSCOPE_AVX2 void unpack_row_avx2(const std::byte* row, int nb, BlockW* out) {
  const int bb = block_bytes(T);
  for (int b = 0; b < nb; ++b) {
    const std::byte* blk = row + static_cast<std::ptrdiff_t>(b) * bb;
    _mm256_store_si256(reinterpret_cast<__m256i*>(out[b].wq), weights_avx2<T>(blk));
    out[b].dw = half_avx(blk);
    out[b].mw = T == GgmlType::kQ4_1 ? half_avx(blk + 2) : 0.0f;
  }
}

// What one pass of row_avx2 reads: the weight row (its blocks, or its unpacked blocks) and the
// activation rows t0 .. t0 + R - 1.
template <int R>
struct Pass256 {
  const std::byte* row;  // kUnpacked false
  const BlockW* bw;      // kUnpacked true
  const std::int8_t* xq[R];
  const float* dx[R];
  const float* lf[R];
  const std::int32_t* ln[R];
};

// Block b into group G = b % 4 of each activation row. Forced inline, not a lambda, so that the
// accumulators stay registers (as pair512).
template <GgmlType T, int R, bool kUnpacked, int G>
KVSCOPE_AVX2 __attribute__((always_inline)) inline void block256(const Pass256<R>& c, int b,
                                                                 __m256 (&acc)[R][kGroups],
                                                                 __m256 (&mins)[R][kGroups]) {
  constexpr bool kMins = T == GgmlType::kQ4_1;
  __m256i wq;
  float dw, mwf = 0.0f;
  if constexpr (kUnpacked) {
    const BlockW& w = c.bw[b];
    wq = _mm256_load_si256(reinterpret_cast<const __m256i*>(w.wq));
    dw = w.dw;
    if constexpr (kMins) mwf = w.mw;
  } else {
    const std::byte* blk = c.row + static_cast<std::ptrdiff_t>(b) * block_bytes(T);
    wq = weights_avx2<T>(blk);
    dw = half_avx(blk);
    if constexpr (kMins) mwf = half_avx(blk + 2);
  }
  const __m256 mw = _mm256_set1_ps(mwf);
  for (int k = 0; k < R; ++k) {
    const __m256i l = lanes_avx2<T>(wq, c.xq[k] + b * kQuantBlock, c.ln[k] + b * kLanes);
    const __m256 dd = _mm256_set1_ps(dw * c.dx[k][b]);
    acc[k][G] = _mm256_add_ps(acc[k][G], _mm256_mul_ps(_mm256_cvtepi32_ps(l), dd));
    if constexpr (kMins)
      mins[k][G] =
          _mm256_add_ps(mins[k][G], _mm256_mul_ps(mw, _mm256_loadu_ps(c.lf[k] + b * kLanes)));
  }
}

// One weight row against activation rows t0 .. t0 + R - 1; block b goes to group b % 4.
template <GgmlType T, int R, bool kUnpacked>
KVSCOPE_AVX2 void row_avx2(const std::byte* row, const BlockW* bw, const QuantizedActs& a, int t0,
                           float* out, long ldo, long r) {
  const int nb = a.n / kQuantBlock;
  __m256 acc[R][kGroups], mins[R][kGroups];
  Pass256<R> c{row, bw, {}, {}, {}, {}};
  for (int k = 0; k < R; ++k) {
    for (int g = 0; g < kGroups; ++g) acc[k][g] = mins[k][g] = _mm256_setzero_ps();
    const std::size_t t = static_cast<std::size_t>(t0 + k);
    c.xq[k] = a.q.data() + t * a.n;
    c.dx[k] = a.d.data() + t * nb;
    c.lf[k] = a.lane_f.data() + t * nb * kLanes;
    c.ln[k] = a.lane.data() + t * nb * kLanes;
  }
  int b = 0;
  for (; b + kGroups <= nb; b += kGroups) {
    block256<T, R, kUnpacked, 0>(c, b, acc, mins);
    block256<T, R, kUnpacked, 1>(c, b + 1, acc, mins);
    block256<T, R, kUnpacked, 2>(c, b + 2, acc, mins);
    block256<T, R, kUnpacked, 3>(c, b + 3, acc, mins);
  }
  if (b < nb) block256<T, R, kUnpacked, 0>(c, b, acc, mins);
  if (b + 1 < nb) block256<T, R, kUnpacked, 1>(c, b + 1, acc, mins);
  if (b + 2 < nb) block256<T, R, kUnpacked, 2>(c, b + 2, acc, mins);
  for (int k = 0; k < R; ++k) {
    // Groups 0..3 are a[0..31]: h = a[0:16] + a[16:32] is (g0 + g2, g1 + g3).
    const __m256 h0 =
        _mm256_add_ps(_mm256_add_ps(acc[k][0], mins[k][0]), _mm256_add_ps(acc[k][2], mins[k][2]));
    const __m256 h1 =
        _mm256_add_ps(_mm256_add_ps(acc[k][1], mins[k][1]), _mm256_add_ps(acc[k][3], mins[k][3]));
    out[(t0 + k) * ldo + r] = reduce8_avx(_mm256_add_ps(h0, h1));
  }
}

// ---- AVX-512 VNNI ----------------------------------------------------------------------------

#define KVSCOPE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

// Blocks b and b + 1 in one register (b in the low half): unsigned nibbles for Q4_0/Q4_1, int8 +
// 128 (unsigned) for Q8_0.
template <GgmlType T>
KVSCOPE_AVX512 inline __m512i pair_u8(const std::byte* blk0, const std::byte* blk1) {
  if constexpr (T == GgmlType::kQ8_0) {
    const __m512i w = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk0 + 2))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk1 + 2)), 1);
    return _mm512_xor_si512(w, _mm512_set1_epi8(-128));
  } else {
    constexpr int off = quants_offset(T);
    const __m256i raw = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk0 + off))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk1 + off)), 1);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i lo = _mm256_and_si256(raw, m4);                        // [lo0 | lo1]
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);  // [hi0 | hi1]
    // [lo0 lo1 hi0 hi1] -> [lo0 hi0 lo1 hi1] (128-bit lanes 0, 2, 1, 3)
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
  }
}

// [dw0 x 8, dw1 x 8] from the blocks' fp16 scales at byte offset `off`.
KVSCOPE_AVX512 inline __m512 pair_half(const std::byte* blk0, const std::byte* blk1, int off) {
  const __m256i h = _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(load_u16(blk1 + off))),
                                     _mm_set1_epi16(static_cast<short>(load_u16(blk0 + off))));
  return _mm512_cvtph_ps(h);
}

// What dpbusd must start from so that it ends at L: minus the zero-point correction
// (8 * lane sums for Q4_0, 128 * lane sums for Q8_0's +128 offset), 0 for Q4_1.
template <GgmlType T>
KVSCOPE_AVX512 inline __m512i start512(const std::int32_t* lane, __mmask16 keep) {
  if constexpr (T == GgmlType::kQ4_1) {
    return _mm512_setzero_si512();
  } else {
    const __m512i l = _mm512_maskz_loadu_epi32(keep, lane);
    return _mm512_sub_epi32(_mm512_setzero_si512(),
                            _mm512_slli_epi32(l, T == GgmlType::kQ4_0 ? 3 : 7));
  }
}

// A pair of weight blocks as the VNNI loop multiplies them: pair_u8's 64 bytes and the two
// blocks' scales (and Q4_1's mins) each repeated over their 8 lanes.
struct alignas(64) PairW {
  std::uint8_t wq[64];
  float dw[16];
  float mw[16];
};

// A weight row's pairs, unpacked once and then read from L1 by every pass over the activation
// rows (unpacking them in each pass cost as much as a third of the loop's vector work).
template <GgmlType T>
KVSCOPE_AVX512 void unpack_row512(const std::byte* row, int nb, PairW* out) {
  const int bb = block_bytes(T);
  for (int b = 0; b < nb; b += 2) {
    const std::byte* blk0 = row + static_cast<std::ptrdiff_t>(b) * bb;
    const std::byte* blk1 = b + 1 == nb ? blk0 : blk0 + bb;  // an odd last block: masked later
    PairW& p = out[b / 2];
    _mm512_store_si512(p.wq, pair_u8<T>(blk0, blk1));
    _mm512_store_ps(p.dw, pair_half(blk0, blk1, 0));
    if constexpr (T == GgmlType::kQ4_1) _mm512_store_ps(p.mw, pair_half(blk0, blk1, 2));
  }
}

// What one pass of row_avx512 reads: the weight row (its blocks, or its unpacked pairs) and the
// activation rows t0 .. t0 + R - 1.
template <int R>
struct Pass512 {
  const std::byte* row;  // kUnpacked false
  const PairW* pw;       // kUnpacked true
  const std::int8_t* xq[R];
  const float* d8[R];
  const float* lf[R];
  const std::int32_t* ln[R];
};

// Blocks b and b + 1 (only b when kOdd: the row's last block alone, its pair's upper half masked
// off) into accumulator P of each activation row. A function rather than a lambda, forced inline,
// so that the accumulators stay registers: captured by reference they were also stored to the
// stack after every multiply-add.
template <GgmlType T, int R, bool kUnpacked, bool kOdd, int P>
KVSCOPE_AVX512 __attribute__((always_inline)) inline void pair512(const Pass512<R>& c, int b,
                                                                  __m512 (&acc)[R][2],
                                                                  __m512 (&mins)[R][2]) {
  constexpr bool kMins = T == GgmlType::kQ4_1;
  constexpr __mmask16 keep = kOdd ? 0x00FF : 0xFFFF;
  constexpr __mmask64 keep_bytes = kOdd ? 0x00000000FFFFFFFFull : ~0ull;
  __m512i wq;
  __m512 dw, mw = _mm512_setzero_ps();
  if constexpr (kUnpacked) {
    const PairW& p = c.pw[b / 2];
    wq = _mm512_load_si512(p.wq);
    dw = _mm512_load_ps(p.dw);
    if constexpr (kMins) mw = _mm512_load_ps(p.mw);
  } else {
    const std::byte* blk0 = c.row + static_cast<std::ptrdiff_t>(b) * block_bytes(T);
    const std::byte* blk1 = kOdd ? blk0 : blk0 + block_bytes(T);  // read twice, masked off below
    wq = pair_u8<T>(blk0, blk1);
    dw = pair_half(blk0, blk1, 0);
    if constexpr (kMins) mw = pair_half(blk0, blk1, 2);
  }
  for (int k = 0; k < R; ++k) {
    const std::int8_t* x = c.xq[k] + b * kQuantBlock;
    const float* d8 = c.d8[k] + b * kLanes;
    const __m512i xv = kOdd ? _mm512_maskz_loadu_epi8(keep_bytes, x) : _mm512_loadu_si512(x);
    const __m512i l = _mm512_dpbusd_epi32(start512<T>(c.ln[k] + b * kLanes, keep), wq, xv);
    const __m512 dx = kOdd ? _mm512_maskz_loadu_ps(keep, d8) : _mm512_loadu_ps(d8);
    const __m512 dd = _mm512_mul_ps(dw, dx);
    if constexpr (kOdd) {
      acc[k][P] =
          _mm512_mask_add_ps(acc[k][P], keep, acc[k][P], _mm512_mul_ps(_mm512_cvtepi32_ps(l), dd));
    } else {
      acc[k][P] = _mm512_add_ps(acc[k][P], _mm512_mul_ps(_mm512_cvtepi32_ps(l), dd));
    }
    if constexpr (kMins) {
      const float* lf = c.lf[k] + b * kLanes;
      if constexpr (kOdd) {
        mins[k][P] = _mm512_mask_add_ps(mins[k][P], keep, mins[k][P],
                                        _mm512_mul_ps(mw, _mm512_maskz_loadu_ps(keep, lf)));
      } else {
        mins[k][P] = _mm512_add_ps(mins[k][P], _mm512_mul_ps(mw, _mm512_loadu_ps(lf)));
      }
    }
  }
}

// One weight row against activation rows t0 .. t0 + R - 1. Pair p (blocks 2p, 2p + 1) goes to
// accumulator p % 2: block b lands in group b % 4, as in the scalar code. An odd last block is a
// pair with its upper half masked off.
// kUnpacked: the row's pairs come from unpack_row512 (`pw`), else from the row's blocks (`row`),
// unpacked here: worth it for a single pass over the row (decode), not for many.
template <GgmlType T, int R, bool kUnpacked>
KVSCOPE_AVX512 void row_avx512(const std::byte* row, const PairW* pw, const QuantizedActs& a,
                               int t0, float* out, long ldo, long r) {
  const int nb = a.n / kQuantBlock;
  __m512 acc[R][2], mins[R][2];
  Pass512<R> c{row, pw, {}, {}, {}, {}};
  for (int k = 0; k < R; ++k) {
    acc[k][0] = acc[k][1] = mins[k][0] = mins[k][1] = _mm512_setzero_ps();
    const std::size_t t = static_cast<std::size_t>(t0 + k);
    c.xq[k] = a.q.data() + t * a.n;
    c.d8[k] = a.d8.data() + t * nb * kLanes;
    c.lf[k] = a.lane_f.data() + t * nb * kLanes;
    c.ln[k] = a.lane.data() + t * nb * kLanes;
  }
  const int full = nb & ~1;  // blocks in whole pairs
  int b = 0;
  for (; b + 4 <= full; b += 4) {
    pair512<T, R, kUnpacked, false, 0>(c, b, acc, mins);
    pair512<T, R, kUnpacked, false, 1>(c, b + 2, acc, mins);
  }
  if (b < full) {  // one whole pair left: accumulator 0
    pair512<T, R, kUnpacked, false, 0>(c, b, acc, mins);
    b += 2;
  }
  if (b < nb) {  // the odd last block, into its pair's accumulator
    if ((b / 2) % 2 == 0) {
      pair512<T, R, kUnpacked, true, 0>(c, b, acc, mins);
    } else {
      pair512<T, R, kUnpacked, true, 1>(c, b, acc, mins);
    }
  }
  for (int k = 0; k < R; ++k) {
    // acc[0] holds groups 0 and 1 (a[0..15]), acc[1] groups 2 and 3 (a[16..31]).
    const __m512 h =
        _mm512_add_ps(_mm512_add_ps(acc[k][0], mins[k][0]), _mm512_add_ps(acc[k][1], mins[k][1]));
    const __m256 s8 =
        _mm256_add_ps(_mm512_castps512_ps256(h),
                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(h), 1)));
    out[(t0 + k) * ldo + r] = reduce8_avx(s8);
  }
}

// ---- Dispatch --------------------------------------------------------------------------------

// Activation rows in chunks that stay in L1 (their int8 values and per-lane scales and sums,
// 4 bytes per element) while every weight row passes over them: without chunks each weight row
// streamed every token's activations from L2 (a 128-token prefill of a 1,536-wide matrix reads
// 768 KiB per row). Weight rows are re-read once per chunk, from L2. A multiple of `per_pass`.
// The chunk fills five sixths of the L1 data cache (the rest: the unpacked row, the stack), 40 KiB
// of a 48 KiB L1d; 32 KiB where the OS does not say. (16 tokens of SmolLM2's 576-wide inputs fit
// in 40 KiB and not in 32: a 16-sequence decode step ran 7% faster.)
std::size_t l1_budget() {
  static const std::size_t budget = [] {
    const long l1d = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    if (l1d <= 0) return std::size_t{32 * 1024};
    return std::clamp<std::size_t>(static_cast<std::size_t>(l1d) / 6 * 5, 16 * 1024, 96 * 1024);
  }();
  return budget;
}

// Weight rows unpacked at a time (`row_bytes` each unpacked): 256 KiB of them, which stay in L2
// while every chunk of activation rows passes over them, so a row is unpacked once per call and
// not once per chunk (a 2,048-token prefill has 128 chunks).
long unpacked_rows(std::size_t row_bytes) {
  return std::max<long>(1, static_cast<long>((256 * 1024) / std::max<std::size_t>(row_bytes, 1)));
}

int chunk_rows(const QuantizedActs& a, int per_pass) {
  const std::size_t per_token = static_cast<std::size_t>(a.n) * 4;
  const int fit = static_cast<int>(std::max<std::size_t>(1, l1_budget() / per_token));
  return std::max(per_pass, fit / per_pass * per_pass);
}

// Weight rows r0 .. r1 - 1 in sets of unpacked_rows: each set unpacked once, `per_row` Units a
// row (unpack(r, its units)), then every chunk of `chunk` of the m activation rows meets every
// row of the set (each(its units, r, c0, c1)).
template <class Unit, class Unpack, class Each>
void over_unpacked_rows(long r0, long r1, std::size_t per_row, int m, int chunk,
                        const Unpack& unpack, const Each& each) {
  const long rows = unpacked_rows(per_row * sizeof(Unit));
  std::vector<Unit> units(per_row * static_cast<std::size_t>(rows));
  auto at = [&](long r, long b0) {
    return units.data() + static_cast<std::size_t>(r - b0) * per_row;
  };
  for (long b0 = r0; b0 < r1; b0 += rows) {
    const long b1 = std::min(r1, b0 + rows);
    for (long r = b0; r < b1; ++r) unpack(r, at(r, b0));
    for (int c0 = 0; c0 < m; c0 += chunk) {
      const int c1 = std::min(m, c0 + chunk);
      for (long r = b0; r < b1; ++r) each(static_cast<const Unit*>(at(r, b0)), r, c0, c1);
    }
  }
}

template <GgmlType T>
void rows_avx2(const std::byte* w, std::int64_t row_bytes, long r0, long r1, const QuantizedActs& a,
               float* out, long ldo) {
  // One activation row per pass over a weight row: 16 registers, 8 accumulators per row.
  const int nb = a.n / kQuantBlock;
  if (a.m == 1) {  // one pass per weight row: unpacked as it is read
    for (long r = r0; r < r1; ++r)
      row_avx2<T, 1, false>(w + r * row_bytes, nullptr, a, 0, out, ldo, r);
    return;
  }
  over_unpacked_rows<BlockW>(
      r0, r1, static_cast<std::size_t>(nb), a.m, chunk_rows(a, 1),
      [&](long r, BlockW* bw) { unpack_row_avx2<T>(w + r * row_bytes, nb, bw); },
      [&](const BlockW* bw, long r, int c0, int c1) {
        for (int t = c0; t < c1; ++t) row_avx2<T, 1, true>(nullptr, bw, a, t, out, ldo, r);
      });
}

template <GgmlType T>
void rows_avx512(const std::byte* w, std::int64_t row_bytes, long r0, long r1,
                 const QuantizedActs& a, float* out, long ldo) {
  // Up to 4 activation rows per pass over a weight row's unpacked pairs, as many as keep the
  // accumulators in registers (32 registers, 4 per row).
  constexpr int kPerPass = 4;
  using RowFn =
      void (*)(const std::byte*, const PairW*, const QuantizedActs&, int, float*, long, long);
  const int nb = a.n / kQuantBlock;
  if (a.m <= kPerPass) {  // one pass per weight row: unpacked as it is read
    const RowFn by_count[5] = {nullptr, &row_avx512<T, 1, false>, &row_avx512<T, 2, false>,
                               &row_avx512<T, 3, false>, &row_avx512<T, 4, false>};
    for (long r = r0; r < r1; ++r) by_count[a.m](w + r * row_bytes, nullptr, a, 0, out, ldo, r);
    return;
  }
  const RowFn by_count[5] = {nullptr, &row_avx512<T, 1, true>, &row_avx512<T, 2, true>,
                             &row_avx512<T, 3, true>, &row_avx512<T, 4, true>};
  over_unpacked_rows<PairW>(
      r0, r1, static_cast<std::size_t>((nb + 1) / 2), a.m, chunk_rows(a, kPerPass),
      [&](long r, PairW* pw) { unpack_row512<T>(w + r * row_bytes, nb, pw); },
      [&](const PairW* pw, long r, int c0, int c1) {
        for (int t = c0; t < c1; t += kPerPass)
          by_count[std::min(kPerPass, c1 - t)](nullptr, pw, a, t, out, ldo, r);
      });
}

template <GgmlType T>
void rows_simd(QuantIsa isa, const std::byte* w, std::int64_t row_bytes, long r0, long r1,
               const QuantizedActs& a, float* out, long ldo) {
  if (isa == QuantIsa::kAvx512Vnni) {
    rows_avx512<T>(w, row_bytes, r0, r1, a, out, ldo);
  } else {
    rows_avx2<T>(w, row_bytes, r0, r1, a, out, ldo);
  }
}
#endif  // KVSCOPE_QUANT_X86

}  // namespace

void quantize_acts(const float* x, int m, int n, QuantizedActs& out) {
  if (n % kQuantBlock != 0) {
    throw InternalError("quantize_acts",
                        "row length " + std::to_string(n) + " is not a multiple of 32");
  }
  const int nb = n / kQuantBlock;
  const std::size_t blocks = static_cast<std::size_t>(m) * nb;
  out.m = m;
  out.n = n;
  out.q.resize(blocks * kQuantBlock);
  out.d.resize(blocks);
  out.d8.resize(blocks * kLanes);
  out.lane.resize(blocks * kLanes);
  out.lane_f.resize(blocks * kLanes);
  for (std::size_t blk = 0; blk < blocks; ++blk) {
    const float* xb = x + blk * kQuantBlock;
    std::int8_t* qb = out.q.data() + blk * kQuantBlock;
    float amax = 0.0f;
    // fmax's result (a NaN is passed over), as a comparison the compiler vectorizes: std::fmax
    // was a call into the C library per element.
    for (int e = 0; e < kQuantBlock; ++e) {
      const float a = std::fabs(xb[e]);
      amax = a > amax ? a : amax;
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out.d[blk] = d;
    for (int i = 0; i < kLanes; ++i) {
      std::int32_t lane = 0;
      for (int e = 4 * i; e < 4 * i + 4; ++e) {
        const long v = std::lrint(xb[e] * id);  // |v| <= 127
        qb[e] = static_cast<std::int8_t>(v);
        lane += static_cast<std::int32_t>(v);
      }
      out.d8[blk * kLanes + i] = d;
      out.lane[blk * kLanes + i] = lane;
      out.lane_f[blk * kLanes + i] = d * static_cast<float>(lane);
    }
  }
}

#if defined(KVSCOPE_QUANT_X86)
namespace {

// CPUID leaf 7, sub-leaf 0, ECX bit 11. Not every compiler's __builtin_cpu_supports knows this
// name or f16c's; the OS's support for the AVX and AVX-512 register state is checked through
// the avx2 and avx512f names, which every one does.
bool cpuid_avx512_vnni() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 11)) != 0;
}

// CPUID leaf 1, ECX bit 29.
bool cpuid_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
}

}  // namespace
#endif  // KVSCOPE_QUANT_X86

const char* quant_isa_name(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kScalar:
      return "scalar";
    case QuantIsa::kAvx2:
      return "avx2";
    case QuantIsa::kAvx512Vnni:
      return "avx512vnni";
    case QuantIsa::kWasmSimd128:
      return "wasm-simd128";
  }
  return "?";
}

bool quant_isa_supported(QuantIsa isa) {
  // Read once: CPUID is slow, and in a virtual machine it traps to the hypervisor (asking on every
  // matmul call cost a fifth of SmolLM2's decode speed here).
#if defined(KVSCOPE_QUANT_X86)
  static const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpuid_f16c();
  static const bool avx512_vnni = avx2 && __builtin_cpu_supports("avx512f") &&
                                  __builtin_cpu_supports("avx512bw") &&
                                  __builtin_cpu_supports("avx512vl") && cpuid_avx512_vnni();
#else
  constexpr bool avx2 = false, avx512_vnni = false;
#endif
#if defined(__wasm_simd128__)
  constexpr bool wasm_simd128 =
      true;  // compiled for it: a browser without SIMD128 rejects the module
#else
  constexpr bool wasm_simd128 = false;
#endif
  switch (isa) {
    case QuantIsa::kScalar:
      return true;
    case QuantIsa::kAvx2:
      return avx2;
    case QuantIsa::kAvx512Vnni:
      return avx512_vnni;
    case QuantIsa::kWasmSimd128:
      return wasm_simd128;
  }
  return false;
}

QuantIsa best_quant_isa() {
  static const QuantIsa chosen = [] {
    QuantIsa best = QuantIsa::kScalar;
    for (QuantIsa isa : {QuantIsa::kAvx2, QuantIsa::kAvx512Vnni, QuantIsa::kWasmSimd128})
      if (quant_isa_supported(isa)) best = isa;
    if (const char* want = std::getenv("KVSCOPE_QUANT_ISA"); want != nullptr && *want != '\0') {
      for (QuantIsa isa :
           {QuantIsa::kScalar, QuantIsa::kAvx2, QuantIsa::kAvx512Vnni, QuantIsa::kWasmSimd128}) {
        if (std::string(want) != quant_isa_name(isa)) continue;
        if (quant_isa_supported(isa)) return isa;
        std::fprintf(stderr, "kvscope: KVSCOPE_QUANT_ISA=%s: this CPU does not run it; using %s\n",
                     want, quant_isa_name(best));
        return best;
      }
      std::fprintf(stderr,
                   "kvscope: KVSCOPE_QUANT_ISA=%s: expected scalar, avx2, avx512vnni or "
                   "wasm-simd128; using %s\n",
                   want, quant_isa_name(best));
    }
    return best;
  }();
  return chosen;
}

std::string describe_weight_format(const Model& model) {
  if (model.format() != CheckpointFormat::kGguf) return model.weight_types();
  if (model.native() == nullptr) return model.weight_types() + ": dequantized to fp32 (f32)";
  return model.weight_types() + ": quantized matmuls (native, " + quant_isa_name(best_quant_isa()) +
         ")";
}

void quant_matmul_rows(QuantIsa isa, GgmlType type, const std::byte* w, std::int64_t row_bytes,
                       long r0, long r1, const QuantizedActs& a, float* out, long ldo) {
  if (!has_native_matmul(type)) {
    throw InternalError("quant_matmul_rows",
                        std::string("no kernel for ggml type ") +
                            ggml_type_traits(static_cast<std::uint32_t>(type))->name);
  }
  if (!quant_isa_supported(isa)) {
    throw InternalError("quant_matmul_rows",
                        std::string("this CPU does not run ") + quant_isa_name(isa));
  }
  if (isa == QuantIsa::kScalar) {
    rows_scalar(type, w, row_bytes, r0, r1, a, out, ldo);
    return;
  }
#if defined(__wasm_simd128__)
  with_block_type(type, [&]<GgmlType T>() { rows_wasm<T>(w, row_bytes, r0, r1, a, out, ldo); });
#endif
#if defined(KVSCOPE_QUANT_X86)
  with_block_type(type,
                  [&]<GgmlType T>() { rows_simd<T>(isa, w, row_bytes, r0, r1, a, out, ldo); });
#endif
}

}  // namespace kvscope::cpu

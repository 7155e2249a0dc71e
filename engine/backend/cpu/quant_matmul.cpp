// See quant_matmul.h for the arithmetic every implementation follows. This file is compiled with
// -ffp-contract=off and without -fassociative-math (engine/CMakeLists.txt), so the compiler keeps
// each float operation as written; the SIMD paths are compiled for their instruction sets with
// target attributes and only ever called after a CPU check; the AVX2 and AVX-512 paths exist on
// x86 builds, the SIMD128 path in the browser build.
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
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/model/quant_panels.h"

// GCC 12's AVX-512 intrinsics start some results from a deliberately undefined register
// (`__m512i __Y = __Y;`), which -W(maybe-)uninitialized reports wherever they are inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace kvscope::cpu {
namespace {

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

// Activation row t: its int8 values, its blocks' scales, sums and d * sum (QuantizedActs).
struct ActRow {
  const std::int8_t* q;
  const float* d;
  const std::int32_t* sum;
  const float* sx;
};
inline ActRow act_row(const QuantizedActs& a, int t) {
  const std::size_t nb = static_cast<std::size_t>(a.n / kQuantBlock);
  return {a.q.data() + static_cast<std::size_t>(t) * a.n, a.d.data() + t * nb,
          a.sum.data() + t * nb, a.sx.data() + t * nb};
}

// ---- Portable reference ----------------------------------------------------------------------

// The block's 32 weights as the integers the dot product multiplies (Q4_0's zero point 8 taken
// off, Q4_1's min handled separately).
template <GgmlType T>
void block_ints(const std::byte* blk, std::int32_t w[kQuantBlock]) {
  const auto* qs = reinterpret_cast<const std::uint8_t*>(blk + native_quants_offset(T));
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

// One weight row against one activation row, the reference's arithmetic as written in
// quant_matmul.h.
template <GgmlType T>
float dot_portable(const std::byte* row, int nb, const ActRow& x) {
  constexpr int bb = native_block_bytes(T);
  std::int32_t wi[kQuantBlock];
  float acc = 0.0f;
  for (int b = 0; b < nb; ++b) {
    const std::byte* blk = row + static_cast<std::ptrdiff_t>(b) * bb;
    block_ints<T>(blk, wi);
    const std::int8_t* xb = x.q + static_cast<std::ptrdiff_t>(b) * kQuantBlock;
    std::int32_t s = 0;
    for (int e = 0; e < kQuantBlock; ++e) s += wi[e] * xb[e];
    float v = static_cast<float>(s) * (fp16_to_fp32(load_u16(blk)) * x.d[b]);
    if constexpr (T == GgmlType::kQ4_1) v = v + fp16_to_fp32(load_u16(blk + 2)) * x.sx[b];
    acc = acc + v;
  }
  return acc;
}

template <GgmlType T>
void rows_portable(const std::byte* w, std::int64_t row_bytes, long r0, long r1,
                   const QuantizedActs& a, float* out, long ldo) {
  const int nb = a.n / kQuantBlock;
  for (int t = 0; t < a.m; ++t) {
    const ActRow x = act_row(a, t);
    for (long r = r0; r < r1; ++r) out[t * ldo + r] = dot_portable<T>(w + r * row_bytes, nb, x);
  }
}

#if defined(__wasm_simd128__)
// ---- WebAssembly SIMD128 ---------------------------------------------------------------------

// The browser build's path (-msimd128), on the blocks as the file stores them: four weight rows
// at a time, each block's four integer sums gathered into one vector, then the reference's float
// step for the four rows at once. fp16 scales are read through a table (WebAssembly has no
// half-precision conversion): fp16_to_fp32's floats. A block's weights are unpacked once for up
// to four activation rows (prefill), not once per row.

// 16 int8 elements as two int16 vectors: the even ones (0, 2, .., 14) and the odd ones.
inline void even_odd16(v128_t v, v128_t& even, v128_t& odd) {
  even = wasm_i16x8_shr(wasm_i16x8_shl(v, 8), 8);
  odd = wasm_i16x8_shr(v, 8);
}

// A block's 32 elements as four int16 vectors: even and odd of elements 0-15, then of 16-31.
struct Split32 {
  v128_t even_lo, odd_lo, even_hi, odd_hi;
};

// A block's integer sum as four int32 partial sums (their total is exact in any order): with both
// sides split even/odd, each i32x4.dot_i16x8_s multiplies and pairs eight elements.
inline v128_t partial_sums(const Split32& w, const Split32& x) {
  return wasm_i32x4_add(wasm_i32x4_add(wasm_i32x4_dot_i16x8(w.even_lo, x.even_lo),
                                       wasm_i32x4_dot_i16x8(w.odd_lo, x.odd_lo)),
                        wasm_i32x4_add(wasm_i32x4_dot_i16x8(w.even_hi, x.even_hi),
                                       wasm_i32x4_dot_i16x8(w.odd_hi, x.odd_hi)));
}

// [total of p0, of p1, of p2, of p3]: four rows' partial sums, added across.
inline v128_t totals4(v128_t p0, v128_t p1, v128_t p2, v128_t p3) {
  const v128_t s01 = wasm_i32x4_add(wasm_i32x4_shuffle(p0, p1, 0, 4, 1, 5),
                                    wasm_i32x4_shuffle(p0, p1, 2, 6, 3, 7));
  const v128_t s23 = wasm_i32x4_add(wasm_i32x4_shuffle(p2, p3, 0, 4, 1, 5),
                                    wasm_i32x4_shuffle(p2, p3, 2, 6, 3, 7));
  return wasm_i32x4_add(wasm_i32x4_shuffle(s01, s23, 0, 1, 4, 5),
                        wasm_i32x4_shuffle(s01, s23, 2, 3, 6, 7));
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

// Four weight rows (rows[0..3], repeats where fewer are left) against activation rows
// [t0, t0 + TN): acc[i] holds the four rows' sums for activation row t0 + i.
template <GgmlType T, int TN>
void quad_wasm(const std::byte* const (&rows)[4], int nb, const QuantizedActs& a,
               const std::vector<Split32>& split, int t0, v128_t (&acc)[TN]) {
  constexpr int bb = native_block_bytes(T);
  const float* half = half_table();
  ActRow x[TN];
  const Split32* x16[TN];
  for (int i = 0; i < TN; ++i) {
    x[i] = act_row(a, t0 + i);
    x16[i] = split.data() + static_cast<std::size_t>(t0 + i) * nb;
    acc[i] = wasm_f32x4_splat(0.0f);
  }
  for (int b = 0; b < nb; ++b) {
    Split32 w[4];
    const std::byte* blk[4];
    for (int j = 0; j < 4; ++j) {
      blk[j] = rows[j] + static_cast<std::ptrdiff_t>(b) * bb;
      w[j] = unpack_split<T>(blk[j] + native_quants_offset(T));
    }
    const v128_t dw = wasm_f32x4_make(half[load_u16(blk[0])], half[load_u16(blk[1])],
                                      half[load_u16(blk[2])], half[load_u16(blk[3])]);
    v128_t mw = wasm_f32x4_splat(0.0f);
    if constexpr (T == GgmlType::kQ4_1) {
      mw = wasm_f32x4_make(half[load_u16(blk[0] + 2)], half[load_u16(blk[1] + 2)],
                           half[load_u16(blk[2] + 2)], half[load_u16(blk[3] + 2)]);
    }
    for (int i = 0; i < TN; ++i) {
      const Split32& xs = x16[i][b];
      const v128_t s = totals4(partial_sums(w[0], xs), partial_sums(w[1], xs),
                               partial_sums(w[2], xs), partial_sums(w[3], xs));
      v128_t v = wasm_f32x4_mul(wasm_f32x4_convert_i32x4(s),
                                wasm_f32x4_mul(dw, wasm_f32x4_splat(x[i].d[b])));
      if constexpr (T == GgmlType::kQ4_1)
        v = wasm_f32x4_add(v, wasm_f32x4_mul(mw, wasm_f32x4_splat(x[i].sx[b])));
      acc[i] = wasm_f32x4_add(acc[i], v);
    }
  }
}

// Weight rows [r0, r1) in fours against activation rows [t0, t0 + TN).
template <GgmlType T, int TN>
void tile_wasm(const std::byte* w, std::int64_t row_bytes, long r0, long r1, const QuantizedActs& a,
               const std::vector<Split32>& split, int t0, float* out, long ldo) {
  const int nb = a.n / kQuantBlock;
  for (long r = r0; r < r1; r += 4) {
    const std::byte* rows[4];
    for (int j = 0; j < 4; ++j) rows[j] = w + std::min(r + j, r1 - 1) * row_bytes;
    v128_t acc[TN];
    quad_wasm<T, TN>(rows, nb, a, split, t0, acc);
    const int valid = static_cast<int>(std::min<long>(4, r1 - r));
    for (int i = 0; i < TN; ++i) {
      float four[4];
      wasm_v128_store(four, acc[i]);
      for (int j = 0; j < valid; ++j) out[(t0 + i) * ldo + r + j] = four[j];
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
  // inside each set of weight rows that stays in cache (64 KiB of weights, in fours).
  const long set = std::max<long>(4, 65536 / row_bytes / 4 * 4);
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
// ---- Panels ----------------------------------------------------------------------------------

// Four activation bytes as one 32-bit value, for a broadcast.
inline std::int32_t load_i32(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Where the panels of rows [r0, r1) start and end, and which of their rows are kept.
struct PanelSpan {
  long p0 = 0, p1 = 0;  // panels [p0, p1)
  long r0 = 0, r1 = 0;
  // Bit j set: row 16 p + j is in [r0, r1).
  std::uint32_t keep(long p) const {
    const long lo = std::max(r0 - p * kPanelRows, 0L);
    const long hi = std::min(r1 - p * kPanelRows, static_cast<long>(kPanelRows));
    if (lo >= hi) return 0;
    return ((1u << (hi - lo)) - 1u) << lo;  // hi - lo <= kPanelRows
  }
};
inline PanelSpan panel_span(long r0, long r1) {
  return {r0 / kPanelRows, (r1 + kPanelRows - 1) / kPanelRows, r0, r1};
}

// Activation rows in chunks that stay in L1 (their int8 values and per-block scales and sums)
// together with one panel, while every panel of a set passes over them: without chunks each panel
// streamed every token's activations from L2 (a 128-token prefill of a 1,536-wide matrix reads
// 192 KiB per panel). The chunk fills five sixths of the L1 data cache less the panel; 32 KiB of
// L1 where the OS does not say. A multiple of `per_pass`.
std::size_t l1_budget() {
  static const std::size_t budget = [] {
    const long l1d = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    if (l1d <= 0) return std::size_t{32 * 1024 / 6 * 5};
    return std::clamp<std::size_t>(static_cast<std::size_t>(l1d) / 6 * 5, 16 * 1024, 96 * 1024);
  }();
  return budget;
}

int chunk_rows(const QuantizedActs& a, std::size_t panel_bytes, int per_pass) {
  const std::size_t per_token = static_cast<std::size_t>(a.n) + a.n / kQuantBlock * 12;
  const std::size_t room = l1_budget() > panel_bytes ? l1_budget() - panel_bytes : 0;
  const int fit = static_cast<int>(std::max<std::size_t>(1, room / per_token));
  return std::max(per_pass, fit / per_pass * per_pass);
}

// Panels met by each chunk of activation rows before the next chunk: 256 KiB of them, which stay
// in L2 while every chunk passes over them.
long panels_per_set(std::size_t panel_bytes) {
  return std::max<long>(1, static_cast<long>((256 * 1024) / std::max<std::size_t>(panel_bytes, 1)));
}

// Panels [s.p0, s.p1) in sets, each set met by every chunk of `chunk` activation rows:
// each(p, c0, c1) for every panel p of the set and chunk [c0, c1).
template <class Each>
void over_panel_sets(const PanelSpan& s, std::size_t panel_bytes, int m, int chunk,
                     const Each& each) {
  const long per_set = panels_per_set(panel_bytes);
  for (long q0 = s.p0; q0 < s.p1; q0 += per_set) {
    const long q1 = std::min(s.p1, q0 + per_set);
    for (int c0 = 0; c0 < m; c0 += chunk) {
      const int c1 = std::min(m, c0 + chunk);
      for (long p = q0; p < q1; ++p) each(p, c0, c1);
    }
  }
}

// ---- AVX2 ------------------------------------------------------------------------------------

#define KVSCOPE_AVX2 __attribute__((target("avx2,fma,f16c")))

// Half h (rows 8h .. 8h + 7) of a panel block against activation rows t0 .. t0 + R - 1: the 8
// rows' block sums, then the float step, into acc[i].
template <GgmlType T, int R>
KVSCOPE_AVX2 __attribute__((always_inline)) inline void half_block_avx2(const std::byte* blk, int h,
                                                                        int b, const ActRow (&x)[R],
                                                                        __m256 (&acc)[R]) {
  const std::byte* qs = blk + 32 * h;
  const __m256 dw = _mm256_cvtph_ps(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + panel_quant_bytes(T) + 16 * h)));
  __m256 mw = _mm256_setzero_ps();
  if constexpr (T == GgmlType::kQ4_1) {
    mw = _mm256_cvtph_ps(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(blk + panel_quant_bytes(T) + 32 + 16 * h)));
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (int i = 0; i < R; ++i) {
    const std::int8_t* xb = x[i].q + b * kQuantBlock;
    __m256i s;
    if constexpr (T == GgmlType::kQ8_0) {
      // |w| (unsigned) times x with w's sign: pairs stay within int16 (at most 2 * 128 * 127),
      // their sums go to int32 one group at a time.
      s = _mm256_setzero_si256();
      for (int k = 0; k < 8; ++k) {
        const __m256i w =
            _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 64 * k)),
                             _mm256_set1_epi8(-128));
        const __m256i xk = _mm256_set1_epi32(load_i32(xb + 4 * k));
        s = _mm256_add_epi32(
            s, _mm256_madd_epi16(
                   _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xk, w)), ones));
      }
    } else {
      // Nibbles 0..15 times int8 (|x| <= 127): a pair is at most 2 * 15 * 128 = 3,840 in
      // magnitude, so the eight groups' pairs add up in int16 (30,720) before one widening.
      const __m256i m4 = _mm256_set1_epi8(0x0F);
      __m256i p16 = _mm256_setzero_si256();
      for (int k = 0; k < 4; ++k) {
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 64 * k));
        const __m256i lo = _mm256_and_si256(raw, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        p16 = _mm256_add_epi16(p16,
                               _mm256_maddubs_epi16(lo, _mm256_set1_epi32(load_i32(xb + 4 * k))));
        p16 = _mm256_add_epi16(
            p16, _mm256_maddubs_epi16(hi, _mm256_set1_epi32(load_i32(xb + 16 + 4 * k))));
      }
      s = _mm256_madd_epi16(p16, ones);
      if constexpr (T == GgmlType::kQ4_0)
        s = _mm256_sub_epi32(s, _mm256_set1_epi32(8 * x[i].sum[b]));
    }
    __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(x[i].d[b])));
    if constexpr (T == GgmlType::kQ4_1)
      v = _mm256_add_ps(v, _mm256_mul_ps(mw, _mm256_set1_ps(x[i].sx[b])));
    acc[i] = _mm256_add_ps(acc[i], v);
  }
}

// One panel against activation rows t0 .. t0 + R - 1, its rows in `keep` stored.
template <GgmlType T, int R>
KVSCOPE_AVX2 void panel_avx2(const std::byte* panel, int nb, const QuantizedActs& a, int t0,
                             float* out, long ldo, long row0, std::uint32_t keep) {
  ActRow x[R];
  for (int i = 0; i < R; ++i) x[i] = act_row(a, t0 + i);
  for (int h = 0; h < 2; ++h) {
    const std::uint32_t kh = (keep >> (8 * h)) & 0xFF;
    if (kh == 0) continue;
    __m256 acc[R];
    for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
    for (int b = 0; b < nb; ++b)
      half_block_avx2<T, R>(panel + static_cast<std::ptrdiff_t>(b) * panel_block_bytes(T), h, b, x,
                            acc);
    for (int i = 0; i < R; ++i) {
      float* o = out + (t0 + i) * ldo + row0 + 8 * h;
      if (kh == 0xFF) {
        _mm256_storeu_ps(o, acc[i]);
      } else {
        alignas(32) float eight[8];
        _mm256_store_ps(eight, acc[i]);
        for (int j = 0; j < 8; ++j)
          if ((kh >> j) & 1) o[j] = eight[j];
      }
    }
  }
}

template <GgmlType T>
void rows_avx2(const std::byte* panels, long r0, long r1, const QuantizedActs& a, float* out,
               long ldo) {
  // Two activation rows per pass over a panel's half, two independent chains (AVX2 has 16
  // registers, not AVX-512's 32).
  constexpr int kPerPass = 2;
  const int nb = a.n / kQuantBlock;
  const std::size_t panel_bytes = static_cast<std::size_t>(nb) * panel_block_bytes(T);
  const PanelSpan s = panel_span(r0, r1);
  over_panel_sets(s, panel_bytes, a.m, chunk_rows(a, panel_bytes, kPerPass),
                  [&](long p, int c0, int c1) {
                    const std::byte* panel = panels + p * panel_bytes;
                    const long row0 = p * kPanelRows;
                    int t = c0;
                    for (; t + 2 <= c1; t += 2)
                      panel_avx2<T, 2>(panel, nb, a, t, out, ldo, row0, s.keep(p));
                    if (t < c1) panel_avx2<T, 1>(panel, nb, a, t, out, ldo, row0, s.keep(p));
                  });
}

// ---- AVX-512 VNNI ----------------------------------------------------------------------------

#define KVSCOPE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

// NP panels (`pstride` bytes apart) against activation rows t0 .. t0 + R - 1: acc[p][i] holds
// panel p's 16 rows' sums for activation row t0 + i. Per block: the panel's eight groups of
// quants as unsigned bytes (nibbles, or int8 + 128), each met by a 32-bit broadcast of the
// activations in one vpdpbusd for 16 rows, the block sums started from the zero-point correction
// (-8 or -128 times the activations' block sum; none for Q4_1) in two chains.
template <GgmlType T, int NP, int R>
KVSCOPE_AVX512 __attribute__((always_inline)) inline void panels512(const std::byte* panel,
                                                                    std::size_t pstride, int nb,
                                                                    const ActRow (&x)[R],
                                                                    __m512 (&acc)[NP][R]) {
  constexpr int qb = panel_quant_bytes(T);
  constexpr int pb = panel_block_bytes(T);
  for (int p = 0; p < NP; ++p)
    for (int i = 0; i < R; ++i) acc[p][i] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int b = 0; b < nb; ++b) {
    for (int p = 0; p < NP; ++p) {
      const std::byte* blk = panel + p * pstride + static_cast<std::ptrdiff_t>(b) * pb;
      __m512i w[8];
      if constexpr (T == GgmlType::kQ8_0) {
        for (int k = 0; k < 8; ++k) w[k] = _mm512_loadu_si512(blk + 64 * k);
      } else {
        for (int k = 0; k < 4; ++k) {
          const __m512i raw = _mm512_loadu_si512(blk + 64 * k);
          w[k] = _mm512_and_si512(raw, m4);
          w[k + 4] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
        }
      }
      const __m512 dw =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + qb)));
      __m512 mw = _mm512_setzero_ps();
      if constexpr (T == GgmlType::kQ4_1)
        mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + qb + 32)));
      for (int i = 0; i < R; ++i) {
        const std::int8_t* xb = x[i].q + b * kQuantBlock;
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        if constexpr (T == GgmlType::kQ4_0) s0 = _mm512_set1_epi32(-8 * x[i].sum[b]);
        if constexpr (T == GgmlType::kQ8_0) s0 = _mm512_set1_epi32(-128 * x[i].sum[b]);
        for (int k = 0; k < 8; k += 2) {
          s0 = _mm512_dpbusd_epi32(s0, w[k], _mm512_set1_epi32(load_i32(xb + 4 * k)));
          s1 = _mm512_dpbusd_epi32(s1, w[k + 1], _mm512_set1_epi32(load_i32(xb + 4 * k + 4)));
        }
        const __m512i s = _mm512_add_epi32(s0, s1);
        __m512 v =
            _mm512_mul_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(x[i].d[b])));
        if constexpr (T == GgmlType::kQ4_1)
          v = _mm512_add_ps(v, _mm512_mul_ps(mw, _mm512_set1_ps(x[i].sx[b])));
        acc[p][i] = _mm512_add_ps(acc[p][i], v);
      }
    }
  }
}

// panels512 for panels p .. p + NP - 1 and activation rows t0 .. t0 + R - 1, stored (the rows
// `span` keeps).
template <GgmlType T, int NP, int R>
KVSCOPE_AVX512 void pass512(const std::byte* panels, std::size_t pstride, long p,
                            const PanelSpan& span, const QuantizedActs& a, int t0, float* out,
                            long ldo) {
  const int nb = a.n / kQuantBlock;
  ActRow x[R];
  for (int i = 0; i < R; ++i) x[i] = act_row(a, t0 + i);
  __m512 acc[NP][R];
  panels512<T, NP, R>(panels + p * pstride, pstride, nb, x, acc);
  for (int q = 0; q < NP; ++q) {
    const __mmask16 keep = static_cast<__mmask16>(span.keep(p + q));
    for (int i = 0; i < R; ++i)
      _mm512_mask_storeu_ps(out + (t0 + i) * ldo + (p + q) * kPanelRows, keep, acc[q][i]);
  }
}

template <GgmlType T>
void rows_avx512(const std::byte* panels, long r0, long r1, const QuantizedActs& a, float* out,
                 long ldo) {
  using PassFn = void (*)(const std::byte*, std::size_t, long, const PanelSpan&,
                          const QuantizedActs&, int, float*, long);
  const int nb = a.n / kQuantBlock;
  const std::size_t pstride = static_cast<std::size_t>(nb) * panel_block_bytes(T);
  const PanelSpan s = panel_span(r0, r1);
  if (a.m < 4) {
    // Decode and small batches: too few activation rows to hide the latency of one panel's
    // chains, so several panels at a time (4, 2, 1 for 1, 2, 3 rows).
    const PassFn by_rows[4][3] = {{},
                                  {&pass512<T, 4, 1>, &pass512<T, 2, 1>, &pass512<T, 1, 1>},
                                  {&pass512<T, 2, 2>, &pass512<T, 1, 2>, &pass512<T, 1, 2>},
                                  {&pass512<T, 1, 3>, &pass512<T, 1, 3>, &pass512<T, 1, 3>}};
    const int np = a.m == 1 ? 4 : a.m == 2 ? 2 : 1;
    long p = s.p0;
    for (; p + np <= s.p1; p += np) by_rows[a.m][0](panels, pstride, p, s, a, 0, out, ldo);
    for (; p + 2 <= s.p1 && np > 2; p += 2) by_rows[a.m][1](panels, pstride, p, s, a, 0, out, ldo);
    for (; p < s.p1; ++p) by_rows[a.m][2](panels, pstride, p, s, a, 0, out, ldo);
    return;
  }
  // Prefill and batched decode: up to eight activation rows per pass over a panel (the eight
  // groups of quants, eight accumulators and the chains fit AVX-512's 32 registers).
  constexpr int kPerPass = 8;
  const PassFn by_count[kPerPass + 1] = {nullptr,           &pass512<T, 1, 1>, &pass512<T, 1, 2>,
                                         &pass512<T, 1, 3>, &pass512<T, 1, 4>, &pass512<T, 1, 5>,
                                         &pass512<T, 1, 6>, &pass512<T, 1, 7>, &pass512<T, 1, 8>};
  over_panel_sets(s, pstride, a.m, chunk_rows(a, pstride, kPerPass), [&](long p, int c0, int c1) {
    for (int t = c0; t < c1; t += kPerPass)
      by_count[std::min(kPerPass, c1 - t)](panels, pstride, p, s, a, t, out, ldo);
  });
}

// quantize_acts' block with eight lanes: the same max (vmaxps is the scalar `a > m ? a : m`, a NaN
// passed over), the same scale, and cvtps2dq rounds x * id to nearest even as lrint does. A NaN
// product is 0x80000000 there, whose low byte is lrint's too (0); the sum counts it as lrint's 0.
KVSCOPE_AVX2 void quantize_block_avx2(const float* xb, std::int8_t* qb, float& d_out,
                                      std::int32_t& sum_out) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 x[4];
  __m256 mx = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    x[i] = _mm256_loadu_ps(xb + 8 * i);
    mx = _mm256_max_ps(_mm256_and_ps(x[i], abs_mask), mx);
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 0x55));
  const float amax = _mm_cvtss_f32(m4);
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m256 vid = _mm256_set1_ps(id);
  const __m256i nan_code = _mm256_set1_epi32(INT32_MIN);
  __m256i q[4];
  __m256i sum = _mm256_setzero_si256();
  for (int i = 0; i < 4; ++i) {
    const __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(x[i], vid));
    q[i] = _mm256_andnot_si256(_mm256_cmpeq_epi32(v, nan_code), v);
    sum = _mm256_add_epi32(sum, q[i]);
  }
  // int32 -> int8 (|q| <= 127: the saturating packs are exact), then the lanes back in order.
  const __m256i w01 = _mm256_packs_epi32(q[0], q[1]);
  const __m256i w23 = _mm256_packs_epi32(q[2], q[3]);
  const __m256i b = _mm256_packs_epi16(w01, w23);
  const __m256i ordered = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), ordered);
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
  d_out = d;
  sum_out = _mm_cvtsi128_si32(s4);
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
  out.sum.resize(blocks);
  out.sx.resize(blocks);
#if defined(KVSCOPE_QUANT_X86)
  if (quant_isa_supported(QuantIsa::kAvx2)) {
    for (std::size_t blk = 0; blk < blocks; ++blk) {
      quantize_block_avx2(x + blk * kQuantBlock, out.q.data() + blk * kQuantBlock, out.d[blk],
                          out.sum[blk]);
      out.sx[blk] = out.d[blk] * static_cast<float>(out.sum[blk]);
    }
    return;
  }
#endif
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
    std::int32_t sum = 0;
    for (int e = 0; e < kQuantBlock; ++e) {
      const long v = std::lrint(xb[e] * id);  // |v| <= 127
      qb[e] = static_cast<std::int8_t>(v);
      sum += static_cast<std::int32_t>(v);
    }
    out.d[blk] = d;
    out.sum[blk] = sum;
    out.sx[blk] = d * static_cast<float>(sum);
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

bool quant_isa_uses_panels(QuantIsa isa) {
  return isa == QuantIsa::kAvx2 || isa == QuantIsa::kAvx512Vnni;
}

void quant_matmul_rows(QuantIsa isa, const QuantMatrix& w, long r0, long r1, const QuantizedActs& a,
                       float* out, long ldo) {
  if (!has_native_matmul(w.type)) {
    throw InternalError("quant_matmul_rows",
                        std::string("no kernel for ggml type ") +
                            ggml_type_traits(static_cast<std::uint32_t>(w.type))->name);
  }
  if (!quant_isa_supported(isa)) {
    throw InternalError("quant_matmul_rows",
                        std::string("this CPU does not run ") + quant_isa_name(isa));
  }
  if (quant_isa_uses_panels(isa) && w.panels == nullptr) {
    throw InternalError("quant_matmul_rows",
                        std::string(quant_isa_name(isa)) + " needs the matrix's panels");
  }
  if (isa == QuantIsa::kScalar) {
    with_block_type(
        w.type, [&]<GgmlType T>() { rows_portable<T>(w.data, w.row_bytes, r0, r1, a, out, ldo); });
    return;
  }
#if defined(__wasm_simd128__)
  with_block_type(w.type,
                  [&]<GgmlType T>() { rows_wasm<T>(w.data, w.row_bytes, r0, r1, a, out, ldo); });
#endif
#if defined(KVSCOPE_QUANT_X86)
  with_block_type(w.type, [&]<GgmlType T>() {
    if (isa == QuantIsa::kAvx512Vnni) {
      rows_avx512<T>(w.panels, r0, r1, a, out, ldo);
    } else {
      rows_avx2<T>(w.panels, r0, r1, a, out, ldo);
    }
  });
#endif
}

}  // namespace kvscope::cpu

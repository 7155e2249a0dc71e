// See quant_matmul.h for the arithmetic every implementation follows. This file is compiled with
// -ffp-contract=off and without -fassociative-math (engine/CMakeLists.txt), so the compiler keeps
// each float operation as written; the SIMD paths are compiled for their instruction sets with
// target attributes and only ever called after a CPU check.
#include "engine/backend/cpu/quant_matmul.h"

#include <immintrin.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/common/error.h"

// GCC 12's AVX-512 intrinsics start some results from a deliberately undefined register
// (`__m512i __Y = __Y;`), which -Wmaybe-uninitialized reports wherever they are inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

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

inline std::uint16_t load_u16(const std::byte* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// The 16 accumulators summed in one fixed tree: halves first (lane i with lane i + 8), then as
// row_dot's reduction. Not inlined, so every caller runs the very same instructions.
__attribute__((noinline)) float reduce16(const float* a) {
  float s[8];
  for (int i = 0; i < 8; ++i) s[i] = a[i] + a[i + 8];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

// ---- Portable reference ----------------------------------------------------------------------

// The block's 32 weights as the integers the dot product multiplies (Q4_0's zero point 8 taken
// off, Q4_1's min handled separately).
void block_ints(GgmlType type, const std::byte* blk, int w[kQuantBlock]) {
  const auto* qs = reinterpret_cast<const std::uint8_t*>(blk + quants_offset(type));
  if (type == GgmlType::kQ8_0) {
    for (int e = 0; e < kQuantBlock; ++e) w[e] = static_cast<std::int8_t>(qs[e]);
    return;
  }
  const int zero = type == GgmlType::kQ4_0 ? 8 : 0;
  for (int j = 0; j < 16; ++j) {
    w[j] = (qs[j] & 0x0F) - zero;
    w[j + 16] = (qs[j] >> 4) - zero;
  }
}

void rows_scalar(GgmlType type, const std::byte* w, std::int64_t row_bytes, long r0, long r1,
                 const QuantizedActs& a, float* out, long ldo) {
  const int nb = a.n / kQuantBlock, bb = block_bytes(type);
  int wi[kQuantBlock];
  for (long r = r0; r < r1; ++r) {
    const std::byte* row = w + r * row_bytes;
    for (int t = 0; t < a.m; ++t) {
      const std::int8_t* xq = a.q.data() + static_cast<std::size_t>(t) * a.n;
      const float* dx = a.d.data() + static_cast<std::size_t>(t) * nb;
      const float* sx = a.s.data() + static_cast<std::size_t>(t) * nb;
      float acc[16] = {};
      float mins = 0.0f;
      for (int b = 0; b < nb; ++b) {
        const std::byte* blk = row + static_cast<std::ptrdiff_t>(b) * bb;
        block_ints(type, blk, wi);
        const float dd = fp16_to_fp32(load_u16(blk)) * dx[b];
        for (int i = 0; i < kLanes; ++i) {
          std::int32_t l = 0;
          for (int e = 4 * i; e < 4 * i + 4; ++e) l += wi[e] * xq[b * kQuantBlock + e];
          float& slot = acc[(b % 2) * kLanes + i];
          slot = std::fma(static_cast<float>(l), dd, slot);
        }
        if (type == GgmlType::kQ4_1) mins = std::fma(fp16_to_fp32(load_u16(blk + 2)), sx[b], mins);
      }
      out[t * ldo + r] = reduce16(acc) + mins;
    }
  }
}

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

template <GgmlType T, int R>
KVSCOPE_AVX2 void row_avx2(const std::byte* row, const QuantizedActs& a, int t0, float* out,
                           long ldo, long r) {
  const int nb = a.n / kQuantBlock, bb = block_bytes(T);
  __m256 acc[R][2];
  float mins[R];
  const std::int8_t* xq[R];
  const float* dx[R];
  const float* sx[R];
  const std::int32_t* ln[R];
  for (int k = 0; k < R; ++k) {
    acc[k][0] = acc[k][1] = _mm256_setzero_ps();
    mins[k] = 0.0f;
    const std::size_t t = static_cast<std::size_t>(t0 + k);
    xq[k] = a.q.data() + t * a.n;
    dx[k] = a.d.data() + t * nb;
    sx[k] = a.s.data() + t * nb;
    ln[k] = a.lane.data() + t * nb * kLanes;
  }
  for (int b = 0; b < nb; ++b) {
    const std::byte* blk = row + static_cast<std::ptrdiff_t>(b) * bb;
    const __m256i wq = weights_avx2<T>(blk);
    const float dw = half_avx(blk);
    const float mw = T == GgmlType::kQ4_1 ? half_avx(blk + 2) : 0.0f;
    for (int k = 0; k < R; ++k) {
      const __m256i l = lanes_avx2<T>(wq, xq[k] + b * kQuantBlock, ln[k] + b * kLanes);
      const float dd = dw * dx[k][b];
      acc[k][b % 2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(l), _mm256_set1_ps(dd), acc[k][b % 2]);
      if constexpr (T == GgmlType::kQ4_1) mins[k] = std::fma(mw, sx[k][b], mins[k]);
    }
  }
  for (int k = 0; k < R; ++k) {
    alignas(32) float lanes[16];
    _mm256_store_ps(lanes, acc[k][0]);
    _mm256_store_ps(lanes + 8, acc[k][1]);
    out[(t0 + k) * ldo + r] = reduce16(lanes) + mins[k];
  }
}

// ---- AVX-512 VNNI ----------------------------------------------------------------------------

#define KVSCOPE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

// Two blocks' weight bytes in one register (block b in the low half): unsigned nibbles for
// Q4_0/Q4_1, int8 + 128 (unsigned) for Q8_0.
template <GgmlType T>
KVSCOPE_AVX512 inline __m256i weights_u8(const std::byte* blk) {
  const __m256i w = weights_avx2<T>(blk);
  if constexpr (T == GgmlType::kQ8_0) return _mm256_xor_si256(w, _mm256_set1_epi8(-128));
  return w;
}

// What dpbusd must start from so that it ends at L: minus the zero-point correction
// (8 * lane sums for Q4_0, 128 * lane sums for Q8_0's +128 offset), 0 for Q4_1.
template <GgmlType T>
KVSCOPE_AVX512 inline __m512i start512(const std::int32_t* lane) {
  if constexpr (T == GgmlType::kQ4_1) {
    return _mm512_setzero_si512();
  } else {
    const __m512i l = _mm512_loadu_si512(lane);
    const int shift = T == GgmlType::kQ4_0 ? 3 : 7;
    return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(l, shift));
  }
}
template <GgmlType T>
KVSCOPE_AVX512 inline __m256i start256(const std::int32_t* lane) {
  if constexpr (T == GgmlType::kQ4_1) {
    return _mm256_setzero_si256();
  } else {
    const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lane));
    const int shift = T == GgmlType::kQ4_0 ? 3 : 7;
    return _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(l, shift));
  }
}

// [a x 8, b x 8]
KVSCOPE_AVX512 inline __m512 pair512(float a, float b) {
  const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_set_ps(0.0f, 0.0f, b, a)));
}

template <GgmlType T, int R>
KVSCOPE_AVX512 void row_avx512(const std::byte* row, const QuantizedActs& a, int t0, float* out,
                               long ldo, long r) {
  const int nb = a.n / kQuantBlock, bb = block_bytes(T);
  __m512 acc[R];
  float mins[R];
  const std::int8_t* xq[R];
  const float* dx[R];
  const float* sx[R];
  const std::int32_t* ln[R];
  for (int k = 0; k < R; ++k) {
    acc[k] = _mm512_setzero_ps();
    mins[k] = 0.0f;
    const std::size_t t = static_cast<std::size_t>(t0 + k);
    xq[k] = a.q.data() + t * a.n;
    dx[k] = a.d.data() + t * nb;
    sx[k] = a.s.data() + t * nb;
    ln[k] = a.lane.data() + t * nb * kLanes;
  }
  int b = 0;
  for (; b + 2 <= nb; b += 2) {
    const std::byte* blk0 = row + static_cast<std::ptrdiff_t>(b) * bb;
    const std::byte* blk1 = blk0 + bb;
    const __m512i wq =
        _mm512_inserti64x4(_mm512_castsi256_si512(weights_u8<T>(blk0)), weights_u8<T>(blk1), 1);
    const float dw0 = half_avx(blk0), dw1 = half_avx(blk1);
    const __m512 dw = pair512(dw0, dw1);
    float mw0 = 0.0f, mw1 = 0.0f;
    if constexpr (T == GgmlType::kQ4_1) {
      mw0 = half_avx(blk0 + 2);
      mw1 = half_avx(blk1 + 2);
    }
    for (int k = 0; k < R; ++k) {
      const __m512i xv = _mm512_loadu_si512(xq[k] + b * kQuantBlock);
      const __m512i l = _mm512_dpbusd_epi32(start512<T>(ln[k] + b * kLanes), wq, xv);
      const __m512 dd = _mm512_mul_ps(dw, pair512(dx[k][b], dx[k][b + 1]));
      acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(l), dd, acc[k]);
      if constexpr (T == GgmlType::kQ4_1) {
        mins[k] = std::fma(mw0, sx[k][b], mins[k]);
        mins[k] = std::fma(mw1, sx[k][b + 1], mins[k]);
      }
    }
  }
  if (b < nb) {  // an odd block count: the last block into the low 8 accumulators only
    const std::byte* blk = row + static_cast<std::ptrdiff_t>(b) * bb;
    const __m256i wq = weights_u8<T>(blk);
    const float dw = half_avx(blk);
    const float mw = T == GgmlType::kQ4_1 ? half_avx(blk + 2) : 0.0f;
    for (int k = 0; k < R; ++k) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[k] + b * 32));
      const __m256i l = _mm256_dpbusd_epi32(start256<T>(ln[k] + b * kLanes), wq, xv);
      const __m512 lf = _mm512_cvtepi32_ps(_mm512_zextsi256_si512(l));
      acc[k] = _mm512_mask3_fmadd_ps(lf, _mm512_set1_ps(dw * dx[k][b]), acc[k], 0x00FF);
      if constexpr (T == GgmlType::kQ4_1) mins[k] = std::fma(mw, sx[k][b], mins[k]);
    }
  }
  for (int k = 0; k < R; ++k) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, acc[k]);
    out[(t0 + k) * ldo + r] = reduce16(lanes) + mins[k];
  }
}

// ---- Dispatch --------------------------------------------------------------------------------

using RowFn = void (*)(const std::byte*, const QuantizedActs&, int, float*, long, long);

template <GgmlType T>
void rows_simd(QuantIsa isa, const std::byte* w, std::int64_t row_bytes, long r0, long r1,
               const QuantizedActs& a, float* out, long ldo) {
  const bool wide = isa == QuantIsa::kAvx512Vnni;
  const RowFn four = wide ? &row_avx512<T, 4> : &row_avx2<T, 4>;
  const RowFn by_count[4] = {nullptr, wide ? &row_avx512<T, 1> : &row_avx2<T, 1>,
                             wide ? &row_avx512<T, 2> : &row_avx2<T, 2>,
                             wide ? &row_avx512<T, 3> : &row_avx2<T, 3>};
  for (long r = r0; r < r1; ++r) {
    // Each weight row meets four activation rows per pass while it is in L1.
    const std::byte* row = w + r * row_bytes;
    int t = 0;
    for (; t + 4 <= a.m; t += 4) four(row, a, t, out, ldo, r);
    if (t < a.m) by_count[a.m - t](row, a, t, out, ldo, r);
  }
}

}  // namespace

void quantize_acts(const float* x, int m, int n, QuantizedActs& out) {
  if (n % kQuantBlock != 0) {
    throw InternalError("quantize_acts", "row length " + std::to_string(n) + " is not a multiple of 32");
  }
  const int nb = n / kQuantBlock;
  out.m = m;
  out.n = n;
  out.q.resize(static_cast<std::size_t>(m) * n);
  out.d.resize(static_cast<std::size_t>(m) * nb);
  out.s.resize(static_cast<std::size_t>(m) * nb);
  out.lane.resize(static_cast<std::size_t>(m) * nb * kLanes);
  for (long blk = 0; blk < static_cast<long>(m) * nb; ++blk) {
    const float* xb = x + blk * kQuantBlock;
    std::int8_t* qb = out.q.data() + blk * kQuantBlock;
    float amax = 0.0f;
    for (int e = 0; e < kQuantBlock; ++e) amax = std::fmax(amax, std::fabs(xb[e]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    std::int32_t sum = 0;
    for (int i = 0; i < kLanes; ++i) {
      std::int32_t lane = 0;
      for (int e = 4 * i; e < 4 * i + 4; ++e) {
        const long v = std::lrint(xb[e] * id);  // |v| <= 127
        qb[e] = static_cast<std::int8_t>(v);
        lane += static_cast<std::int32_t>(v);
      }
      out.lane[static_cast<std::size_t>(blk) * kLanes + i] = lane;
      sum += lane;
    }
    out.d[static_cast<std::size_t>(blk)] = d;
    out.s[static_cast<std::size_t>(blk)] = d * static_cast<float>(sum);
  }
}

const char* quant_isa_name(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kScalar:
      return "scalar";
    case QuantIsa::kAvx2:
      return "avx2";
    case QuantIsa::kAvx512Vnni:
      return "avx512vnni";
  }
  return "?";
}

bool quant_isa_supported(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kScalar:
      return true;
    case QuantIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case QuantIsa::kAvx512Vnni:
      return quant_isa_supported(QuantIsa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512vnni");
  }
  return false;
}

QuantIsa best_quant_isa() {
  static const QuantIsa chosen = [] {
    QuantIsa best = QuantIsa::kScalar;
    for (QuantIsa isa : {QuantIsa::kAvx2, QuantIsa::kAvx512Vnni})
      if (quant_isa_supported(isa)) best = isa;
    if (const char* want = std::getenv("KVSCOPE_QUANT_ISA"); want != nullptr && *want != '\0') {
      for (QuantIsa isa : {QuantIsa::kScalar, QuantIsa::kAvx2, QuantIsa::kAvx512Vnni}) {
        if (std::string(want) != quant_isa_name(isa)) continue;
        if (quant_isa_supported(isa)) return isa;
        std::fprintf(stderr, "kvscope: KVSCOPE_QUANT_ISA=%s: this CPU does not run it; using %s\n",
                     want, quant_isa_name(best));
        return best;
      }
      std::fprintf(stderr,
                   "kvscope: KVSCOPE_QUANT_ISA=%s: expected scalar, avx2 or avx512vnni; using %s\n",
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
    throw InternalError("quant_matmul_rows", std::string("no kernel for ggml type ") +
                                                 ggml_type_traits(static_cast<std::uint32_t>(type))->name);
  }
  if (!quant_isa_supported(isa)) {
    throw InternalError("quant_matmul_rows", std::string("this CPU does not run ") + quant_isa_name(isa));
  }
  if (isa == QuantIsa::kScalar) {
    rows_scalar(type, w, row_bytes, r0, r1, a, out, ldo);
    return;
  }
  switch (type) {
    case GgmlType::kQ4_0:
      return rows_simd<GgmlType::kQ4_0>(isa, w, row_bytes, r0, r1, a, out, ldo);
    case GgmlType::kQ4_1:
      return rows_simd<GgmlType::kQ4_1>(isa, w, row_bytes, r0, r1, a, out, ldo);
    default:
      return rows_simd<GgmlType::kQ8_0>(isa, w, row_bytes, r0, r1, a, out, ldo);
  }
}

}  // namespace kvscope::cpu

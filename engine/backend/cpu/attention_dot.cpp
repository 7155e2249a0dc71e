// See attention_dot.h. Built with -ffp-contract=off (engine/CMakeLists.txt) and without
// -fassociative-math: every product, fused multiply-add and sum stays as written.
#include "engine/backend/cpu/attention_dot.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "engine/backend/cpu/fma.h"

namespace kvscope::cpu {
namespace {

#if defined(__AVX2__) && defined(__FMA__)
inline float reduce8(__m256 acc) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));  // s0 + s2, s1 + s3
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 0x55)));
}
#else
float reduce8(const float* lane) {
  const float s0 = lane[0] + lane[4], s1 = lane[1] + lane[5];
  const float s2 = lane[2] + lane[6], s3 = lane[3] + lane[7];
  return (s0 + s2) + (s1 + s3);
}
#endif

}  // namespace

float attention_dot(const float* q, const float* k, int n) {
#if defined(__AVX2__) && defined(__FMA__)
  __m256 acc = _mm256_setzero_ps();
  for (int j = 0; j < n; j += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + j), _mm256_loadu_ps(k + j), acc);
  return reduce8(acc);
#else
  float lane[8] = {};
  for (int j = 0; j < n; j += 8)
    for (int i = 0; i < 8; ++i) lane[i] = cpu::fma(q[j + i], k[j + i], lane[i]);
  return reduce8(lane);
#endif
}

void attention_dot4(const float* q, const float* k, std::size_t stride, int n, float out[4]) {
  const float* k1 = k + stride;
  const float* k2 = k1 + stride;
  const float* k3 = k2 + stride;
#if defined(__AVX2__) && defined(__FMA__)
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int j = 0; j < n; j += 8) {
    const __m256 x = _mm256_loadu_ps(q + j);
    a0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k + j), a0);
    a1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k1 + j), a1);
    a2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k2 + j), a2);
    a3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k3 + j), a3);
  }
  out[0] = reduce8(a0);
  out[1] = reduce8(a1);
  out[2] = reduce8(a2);
  out[3] = reduce8(a3);
#else
  out[0] = attention_dot(q, k, n);
  out[1] = attention_dot(q, k1, n);
  out[2] = attention_dot(q, k2, n);
  out[3] = attention_dot(q, k3, n);
#endif
}

namespace {

#if defined(__AVX2__) && defined(__FMA__)
// attention_dot8, inlined into the loops below.
__attribute__((always_inline)) inline void dot8(const float* q, const float* k, std::size_t stride,
                                                int n, float* out) {
  const float* k1 = k + stride;
  const float* k2 = k1 + stride;
  const float* k3 = k2 + stride;
  const float* k4 = k3 + stride;
  const float* k5 = k4 + stride;
  const float* k6 = k5 + stride;
  const float* k7 = k6 + stride;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (int j = 0; j < n; j += 8) {
    const __m256 x = _mm256_loadu_ps(q + j);
    a0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k + j), a0);
    a1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k1 + j), a1);
    a2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k2 + j), a2);
    a3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k3 + j), a3);
    a4 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k4 + j), a4);
    a5 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k5 + j), a5);
    a6 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k6 + j), a6);
    a7 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k7 + j), a7);
  }
  // reduce8 of the eight at once. s_i = lane_i + lane_{i+4}, keys 2i and 2i + 1 side by side:
  // [key 2i: s0 s1 s2 s3 | key 2i+1: s0 s1 s2 s3].
  const auto halves = [](__m256 x, __m256 y) {
    return _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31));
  };
  const __m256 s01 = halves(a0, a1), s23 = halves(a2, a3), s45 = halves(a4, a5),
               s67 = halves(a6, a7);
  // (s0 + s2) and (s1 + s3): [2i: t0 t1, 2i+2: t0 t1 | 2i+1: t0 t1, 2i+3: t0 t1].
  const auto pairs = [](__m256 x, __m256 y) {
    return _mm256_add_ps(_mm256_shuffle_ps(x, y, 0x44), _mm256_shuffle_ps(x, y, 0xee));
  };
  const __m256 t0 = pairs(s01, s23), t1 = pairs(s45, s67);
  // t0 + t1: keys [0 2 4 6 | 1 3 5 7], then back in order.
  const __m256 sum =
      _mm256_add_ps(_mm256_shuffle_ps(t0, t1, 0x88), _mm256_shuffle_ps(t0, t1, 0xdd));
  _mm256_storeu_ps(out, _mm256_permutevar8x32_ps(sum, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}
#endif

}  // namespace

void attention_dot8(const float* q, const float* k, std::size_t stride, int n, float out[8]) {
#if defined(__AVX2__) && defined(__FMA__)
  dot8(q, k, stride, n, out);
#else
  attention_dot4(q, k, stride, n, out);
  attention_dot4(q, k + 4 * stride, stride, n, out + 4);
#endif
}

void attention_dots(const float* q, const float* k, std::size_t stride, int n, int count,
                    float* out) {
  int i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  for (; i + 8 <= count; i += 8)
    dot8(q, k + static_cast<std::size_t>(i) * stride, stride, n, out + i);
#endif
  for (; i + 4 <= count; i += 4)
    attention_dot4(q, k + static_cast<std::size_t>(i) * stride, stride, n, out + i);
  for (; i < count; ++i) out[i] = attention_dot(q, k + static_cast<std::size_t>(i) * stride, n);
}

void attention_dots_one_key(const float* q, std::size_t stride, int count, const float* k, int n,
                            float* out) {
  int j = 0;
#if defined(__AVX2__) && defined(__FMA__)
  for (; j + 4 <= count; j += 4) {
    const float* q0 = q + static_cast<std::size_t>(j) * stride;
    const float* q1 = q0 + stride;
    const float* q2 = q1 + stride;
    const float* q3 = q2 + stride;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int e = 0; e < n; e += 8) {
      const __m256 x = _mm256_loadu_ps(k + e);
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + e), x, a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q1 + e), x, a1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q2 + e), x, a2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q3 + e), x, a3);
    }
    out[j] = reduce8(a0);
    out[j + 1] = reduce8(a1);
    out[j + 2] = reduce8(a2);
    out[j + 3] = reduce8(a3);
  }
  if (count - j == 3 || count - j == 2) {  // two at once, then at most one alone
    const float* q0 = q + static_cast<std::size_t>(j) * stride;
    const float* q1 = q0 + stride;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    for (int e = 0; e < n; e += 8) {
      const __m256 x = _mm256_loadu_ps(k + e);
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + e), x, a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q1 + e), x, a1);
    }
    out[j] = reduce8(a0);
    out[j + 1] = reduce8(a1);
    j += 2;
  }
#endif
  for (; j < count; ++j) out[j] = attention_dot(q + static_cast<std::size_t>(j) * stride, k, n);
}

}  // namespace kvscope::cpu

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

// Bit-level float conversions (binary16, bfloat16, OCP FP8 E4M3 / E5M2), written from the format
// definitions: round to nearest even, saturate at the largest finite value.
#include "engine/quant/float_formats.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/common/bit_cast.h"

namespace kvscope::quant {
namespace {

// Positive values of every code of an 8-bit format, by code ([256]; negative half mirrors).
struct Fp8Table {
  std::array<float, 256> value{};
  int max_code = 0;      // largest finite positive code
  std::uint8_t nan = 0;  // positive NaN code
};

Fp8Table make_e4m3() {
  Fp8Table t;
  for (int c = 0; c < 256; ++c) {
    const int e = (c >> 3) & 0xF, m = c & 7;
    float v;
    if (e == 15 && m == 7)
      v = NAN;
    else if (e == 0)
      v = std::ldexp(static_cast<float>(m), -9);
    else
      v = std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
    t.value[static_cast<std::size_t>(c)] = (c & 0x80) ? -v : v;
  }
  t.max_code = 0x7E;
  t.nan = 0x7F;
  return t;
}

Fp8Table make_e5m2() {
  Fp8Table t;
  for (int c = 0; c < 256; ++c) {
    const int e = (c >> 2) & 0x1F, m = c & 3;
    float v;
    if (e == 31)
      v = m == 0 ? INFINITY : NAN;
    else if (e == 0)
      v = std::ldexp(static_cast<float>(m), -16);
    else
      v = std::ldexp(1.0f + static_cast<float>(m) / 4.0f, e - 15);
    t.value[static_cast<std::size_t>(c)] = (c & 0x80) ? -v : v;
  }
  t.max_code = 0x7B;
  t.nan = 0x7E;
  return t;
}

const Fp8Table& e4m3() {
  static const Fp8Table t = make_e4m3();
  return t;
}
const Fp8Table& e5m2() {
  static const Fp8Table t = make_e5m2();
  return t;
}

// 2^e as a float, for the format constants below.
constexpr float pow2(int e) {
  float v = 1.0f;
  for (; e > 0; --e) v *= 2.0f;
  for (; e < 0; ++e) v /= 2.0f;
  return v;
}

// The nearest code of a finite a >= 0 below the format's largest value, for a format with M
// mantissa bits and exponent bias B, ties to the even code (round to nearest even). Below the
// smallest normal value the codes are the integers a / 2^(1 - B - M), and the FPU rounds a scaled
// by that power of two (exact) to the nearest even integer; 2^M, the smallest normal code, is the
// largest it can give. Above, the float's own bits are rounded: M mantissa bits kept, half an
// ulp added, and the kept bits' parity breaks ties; a carry out of the mantissa steps the
// exponent, as the next code does.
template <int M, int B>
int nearest_code(float a) {
  constexpr float kMinNormal = pow2(1 - B);
  constexpr float kScale = pow2(B - 1 + M);
  if (a < kMinNormal) return static_cast<int>(std::nearbyint(a * kScale));
  constexpr int kShift = 23 - M;
  const std::uint32_t bits = kvscope::bit_cast<std::uint32_t>(a);
  const std::uint32_t rounded = bits + ((1u << (kShift - 1)) - 1u) + ((bits >> kShift) & 1u);
  return static_cast<int>((rounded >> kShift) - (static_cast<std::uint32_t>(127 - B) << M));
}

// x in an 8-bit format: NaN to the format's NaN, at or above the largest value saturated to it,
// else the nearest code; the sign kept (zero included).
template <int M, int B>
std::uint8_t encode_fp8(const Fp8Table& t, float x) {
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return static_cast<std::uint8_t>(sign | t.nan);
  const float a = std::fabs(x);
  if (a >= t.value[static_cast<std::size_t>(t.max_code)]) {
    return static_cast<std::uint8_t>(sign | t.max_code);
  }
  return static_cast<std::uint8_t>(sign | nearest_code<M, B>(a));
}

}  // namespace

std::uint16_t f32_to_f16(float x) {
  const std::uint32_t bits = kvscope::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t ax = bits & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u);   // NaN
  if (ax >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7BFFu);  // >= 65520: saturate
  if (ax < 0x38800000u) {
    // Below the smallest normal (2^-14): subnormal steps of 2^-24; 1024 steps carry into 0x0400.
    const float steps = std::nearbyint(kvscope::bit_cast<float>(ax) * 16777216.0f);
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(steps));
  }
  const std::uint32_t mant = ax & 0x7FFFFFu;
  const std::uint32_t exp = (ax >> 23) - 127 + 15;
  std::uint32_t h = (exp << 10) | (mant >> 13);
  const std::uint32_t rest = mant & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carry may bump the exponent
  return static_cast<std::uint16_t>(sign | h);
}

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu;
  const std::uint32_t mant = h & 0x3FFu;
  if (exp == 0) {
    const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);  // exact
    return sign ? -v : v;
  }
  if (exp == 31) return kvscope::bit_cast<float>(sign | 0x7F800000u | (mant << 13));
  return kvscope::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

std::uint16_t f32_to_bf16(float x) {
  const std::uint32_t bits = kvscope::bit_cast<std::uint32_t>(x);
  const std::uint32_t ax = bits & 0x7FFFFFFFu;
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  if (ax > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7FC0u);  // NaN
  const std::uint32_t rounded = ax + 0x7FFFu + ((ax >> 16) & 1u);
  if (rounded >= 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7F7Fu);  // saturate
  return static_cast<std::uint16_t>(sign | (rounded >> 16));
}

float bf16_to_f32(std::uint16_t b) {
  return kvscope::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

void f16_row_to_f32(const std::byte* src, float* dst, int n) {
  int i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i h;
    std::memcpy(&h, src + 2 * i, sizeof h);
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) {
    std::uint16_t h;
    std::memcpy(&h, src + 2 * i, sizeof h);
    dst[i] = f16_to_f32(h);
  }
}

void bf16_row_to_f32(const std::byte* src, float* dst, int n) {
  for (int i = 0; i < n; ++i) {
    std::uint16_t b;
    std::memcpy(&b, src + 2 * i, sizeof b);
    dst[i] = kvscope::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
  }
}

std::uint8_t f32_to_e4m3(float x) {
  return encode_fp8<3, 7>(e4m3(), x);
}
float e4m3_to_f32(std::uint8_t c) {
  return e4m3().value[c];
}
std::uint8_t f32_to_e5m2(float x) {
  return encode_fp8<2, 15>(e5m2(), x);
}
float e5m2_to_f32(std::uint8_t c) {
  return e5m2().value[c];
}
const float* e4m3_table() {
  return e4m3().value.data();
}
const float* e5m2_table() {
  return e5m2().value.data();
}

}  // namespace kvscope::quant

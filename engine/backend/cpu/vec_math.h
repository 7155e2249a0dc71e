// exp for the softmax and SwiGLU loops, written so the compiler can vectorize it (glibc's scalar
// expf is a call the loop cannot inline; llama2.c's -Ofast build gets libmvec's vector expf, which
// needs -ffast-math, and -ffinite-math-only would break the -inf masks of evicted slots).
//
// exp(x) = 2^n * e^r with n = round(x / ln 2) and |r| <= ln(2)/2: r by a two-constant Cody-Waite
// reduction, e^r by its Taylor series to r^7 (truncation error < 6e-9 relative, below float's
// half ulp), 2^n built in the exponent bits. Explicit fma keeps the reduction's order under
// -fassociative-math. Relative error within a few ulp of std::exp (tests/backend/vec_math_test).
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/backend/cpu/fma.h"
#include "engine/common/bit_cast.h"

namespace kvscope::cpu {

// Below this, e^x is under float's normal range: the result is 0 (what softmax wants for masked
// -inf scores). Above kExpMax the input is clamped: e^88 = 1.65e38 stays finite.
inline constexpr float kExpMin = -87.3f;
inline constexpr float kExpMax = 88.0f;

inline float vexp(float x) {
  const bool underflow = !(x >= kExpMin);  // also true for -inf and NaN
  float xc = x < kExpMin ? kExpMin : x;    // selects, not fmin/fmax calls: they vectorize
  xc = xc > kExpMax ? kExpMax : xc;
  const float n = std::floor(xc * 1.44269504088896341f + 0.5f);
  float r = cpu::fma(n, -0.693359375f, xc);  // ln 2, high part (exact in few bits)
  r = cpu::fma(n, 2.12194440e-4f, r);        // ln 2 - high part
  float p = 1.0f / 5040.0f;
  p = cpu::fma(p, r, 1.0f / 720.0f);
  p = cpu::fma(p, r, 1.0f / 120.0f);
  p = cpu::fma(p, r, 1.0f / 24.0f);
  p = cpu::fma(p, r, 1.0f / 6.0f);
  p = cpu::fma(p, r, 0.5f);
  p = cpu::fma(p, r, 1.0f);
  p = cpu::fma(p, r, 1.0f);
  const float scale = kvscope::bit_cast<float>(static_cast<std::int32_t>(n + 127.0f) << 23);
  return underflow ? 0.0f : p * scale;
}

}  // namespace kvscope::cpu

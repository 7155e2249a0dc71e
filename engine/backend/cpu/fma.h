// cpu::fma(a, b, c): a * b + c rounded once, as std::fma, for the kernels that promise the same
// bits on every machine (quant_matmul.cpp, vec_math.h, the attention's value sum).
//
// Where the CPU has a fused multiply-add, std::fma is that instruction. WebAssembly has none (the
// browser build, docs/web.md), and std::fma there is a call into the C library (musl's fmaf),
// which took over a third of SmolLM2's time in the page. Its common case is inlined here: a * b
// is exact in double (24 + 24 bits), so a * b + c is rounded once in double (to s), and rounding
// s to float gives the correctly rounded result unless s lies exactly halfway between two floats
// (the 29 bits double keeps beyond float's are 1000...0) after a rounding. A halfway s that is
// the exact sum (checked with Knuth's two-sum: the error of the double addition is zero) is
// rounded once, correctly; only a rounded one needs the library call. The same bits as std::fma
// in every case (tests/web/ runs the parity tests on it).
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/common/bit_cast.h"

namespace kvscope::cpu {

#if defined(__wasm__)
// The rare case: s (a * b + c rounded in double) lies exactly halfway between two floats. Out of
// line for two reasons: inlined, the compiler vectorizing a loop of cpu::fma may compute the
// library call for every element and select (a vector fma is four calls into the C library in
// WebAssembly), which cost the page's attention 7% of its decode time; and fma.cpp is compiled
// without -fassociative-math, which in a caller's translation unit (cpu_ops.cpp has it) would let
// the compiler simplify the two-sum's error term away.
float fma_halfway(float a, float b, float c);
#endif

inline float fma(float a, float b, float c) {
#if defined(__wasm__)
  const double p = static_cast<double>(a) * static_cast<double>(b);
  const double s = p + static_cast<double>(c);
  if ((kvscope::bit_cast<std::uint64_t>(s) & 0x1fffffffu) != 0x10000000u)
    return static_cast<float>(s);
  return fma_halfway(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

}  // namespace kvscope::cpu

// The attention scores' dot products q . k, for head sizes that are a multiple of 8, one key at a
// time or four at once with the same bits: eight lanes, lane i summing the products of elements
// i, i + 8, i + 16, ... with a fused multiply-add each, in order, then s_i = lane_i + lane_{i+4}
// and the result (s0 + s2) + (s1 + s3). That is what GCC made of the plain loop
// `acc += a[j] * b[j]` in cpu_ops.cpp (-fassociative-math, AVX2 and FMA, 256-bit vectors) before
// it was written out here, so the scores kept their bits; written out, it is the same on every
// machine (AVX2 or not, the browser's WebAssembly too), and four keys can share a pass: each
// score is a chain of fused multiply-adds, and four independent chains keep the FMA units busy
// where one waited on its own latency (docs/performance.md).
#pragma once

#include <cstddef>

namespace kvscope::cpu {

// Whether the dots below take head size n (a positive multiple of 8).
constexpr bool attention_dot_fits(int n) {
  return n > 0 && n % 8 == 0;
}
// q . k over n floats (attention_dot_fits(n)).
float attention_dot(const float* q, const float* k, int n);
// out[i] = attention_dot(q, k + i * stride, n) for i < 4.
void attention_dot4(const float* q, const float* k, std::size_t stride, int n, float out[4]);
// out[i] = attention_dot(q, k + i * stride, n) for i < 8: eight chains of fused multiply-adds in
// flight (four wait on their own latency), and the eight reductions done together, transposed.
void attention_dot8(const float* q, const float* k, std::size_t stride, int n, float out[8]);
// out[i] = attention_dot(q, k + i * stride, n) for i < count: eight keys a pass, then four, then
// one at a time, in one call.
void attention_dots(const float* q, const float* k, std::size_t stride, int n, int count,
                    float* out);
// out[j] = attention_dot(q + j * stride, k, n) for j < count: the query heads of a GQA group
// against one key, four at a pass.
void attention_dots_one_key(const float* q, std::size_t stride, int count, const float* k, int n,
                            float* out);

}  // namespace kvscope::cpu

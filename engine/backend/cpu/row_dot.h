// Weight-row dot products with a fixed summation order, shared by matmul (one input row) and
// matmul_batch (several input rows against each weight row), so a batched step is bit-identical
// to its tokens run one by one on any compiler: 16 products per iteration into two 8-lane
// accumulators, a fixed pairwise reduction of the 16 lanes, then the tail in order.
// row_dot.cpp is compiled without -fassociative-math (engine/CMakeLists.txt), so the compiler
// keeps exactly this order; GCC/Clang vector extensions map the 8 lanes to AVX/NEON registers.
#pragma once

namespace kvscope::cpu {

// sum_j w[j] * x[j]
float row_dot(const float* w, const float* x, int n);
// out[t] = row_dot(w, x + t * stride, n) for t < 4, bit for bit, reading each w chunk once.
void row_dot4(const float* w, const float* x, long stride, int n, float out[4]);
// The same for t < 8: 16 accumulators, which stay in registers where AVX-512VL gives 32 of them.
void row_dot8(const float* w, const float* x, long stride, int n, float out[8]);

}  // namespace kvscope::cpu

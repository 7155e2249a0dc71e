// See row_dot.h. The three functions must stay in step: same chunking, same accumulator updates,
// same reduction, same tail (tests/infer/forward_step_test.cpp, MatmulBatch, checks it bitwise).
#include "engine/backend/cpu/row_dot.h"

#include <cstring>

namespace kvscope::cpu {
namespace {

using v8 = float __attribute__((vector_size(32)));

inline v8 load8(const float* p) {
  v8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The 16 lanes of (a, b), summed in one fixed tree. Not inlined, like tail(): each caller runs the
// very same instructions, whatever the compiler would make of the expression in each context
// (contraction into FMAs, vectorizing the tail's products).
__attribute__((noinline)) float reduce(v8 a, v8 b) {
  const v8 s = a + b;
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

// acc + sum_{j0 <= j < n} w[j] * x[j], in order.
__attribute__((noinline)) float tail(const float* w, const float* x, int j0, int n, float acc) {
  for (int j = j0; j < n; ++j) acc += w[j] * x[j];
  return acc;
}

}  // namespace

float row_dot(const float* w, const float* x, int n) {
  v8 s0 = {}, s1 = {};
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    s0 += load8(w + j) * load8(x + j);
    s1 += load8(w + j + 8) * load8(x + j + 8);
  }
  return tail(w, x, j, n, reduce(s0, s1));
}

void row_dot4(const float* w, const float* x, long stride, int n, float out[4]) {
  const float* x0 = x;
  const float* x1 = x + stride;
  const float* x2 = x + 2 * stride;
  const float* x3 = x + 3 * stride;
  v8 a0 = {}, b0 = {}, a1 = {}, b1 = {}, a2 = {}, b2 = {}, a3 = {}, b3 = {};
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    const v8 lo = load8(w + j), hi = load8(w + j + 8);
    a0 += lo * load8(x0 + j);
    b0 += hi * load8(x0 + j + 8);
    a1 += lo * load8(x1 + j);
    b1 += hi * load8(x1 + j + 8);
    a2 += lo * load8(x2 + j);
    b2 += hi * load8(x2 + j + 8);
    a3 += lo * load8(x3 + j);
    b3 += hi * load8(x3 + j + 8);
  }
  out[0] = tail(w, x0, j, n, reduce(a0, b0));
  out[1] = tail(w, x1, j, n, reduce(a1, b1));
  out[2] = tail(w, x2, j, n, reduce(a2, b2));
  out[3] = tail(w, x3, j, n, reduce(a3, b3));
}

void row_dot8(const float* w, const float* x, long stride, int n, float out[8]) {
  const float* xs[8];
  for (int t = 0; t < 8; ++t) xs[t] = x + t * stride;
  v8 a[8] = {}, b[8] = {};
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    const v8 lo = load8(w + j), hi = load8(w + j + 8);
#pragma GCC unroll 8
    for (int t = 0; t < 8; ++t) {
      a[t] += lo * load8(xs[t] + j);
      b[t] += hi * load8(xs[t] + j + 8);
    }
  }
  for (int t = 0; t < 8; ++t) out[t] = tail(w, xs[t], j, n, reduce(a[t], b[t]));
}

}  // namespace kvscope::cpu

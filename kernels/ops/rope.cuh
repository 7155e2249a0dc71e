// RoPE on one token's q [q_dim] and k [kv_dim]: adjacent pairs (2i, 2i+1) of each head rotated by
// pos * theta^(-2i/head_dim), llama2.c's pairing (which GGUF Llama models are converted to).
// One thread per pair, q's pairs then k's; one block column per token of a step.
// CPU twin: cpu::rope.
#pragma once

#include "kernels/common/simt_api.cuh"

KVS_KERNELS_BEGIN

// Rotates the pair (v[0], v[1]) at offset hd (even) of a head by pos * theta^(-hd/head_dim).
KVS_DEVICE void rope_pair(float* v, int hd, int pos, int head_dim, float theta) {
  const float freq = 1.0f / powf(theta, static_cast<float>(hd) / static_cast<float>(head_dim));
  const float angle = static_cast<float>(pos) * freq;  // the CPU's float angle, bit for bit
  // Its cosine and sine: reduced to [-pi, pi] in double (exact to ~1e-12 for any position), then
  // the fast single-precision pair, accurate to ~4e-7 there. cosf/sinf would reduce large angles
  // with a table in local memory, which the build refuses (ptxas --warn-on-local-memory-usage).
  const double turns = rint(static_cast<double>(angle) * 0.15915494309189535);  // 1 / (2 pi)
  const float r = static_cast<float>(fma(-turns, 6.283185307179586, static_cast<double>(angle)));
  float s, c;
  simt::sincos_small(r, &s, &c);
  const float v0 = v[0], v1 = v[1];
  v[0] = v0 * c - v1 * s;
  v[1] = v0 * s + v1 * c;
}

KVS_GLOBAL void rope_kernel(float* q, float* k, const int* pos, int q_dim, int kv_dim, int head_dim,
                            float theta) {
  const int t = static_cast<int>(simt::bid_y());
  const int pair = static_cast<int>(simt::bid_x() * simt::bdim_x() + simt::tid_x());
  const int q_pairs = q_dim / 2, pairs = q_pairs + kv_dim / 2;
  if (pair >= pairs) return;
  float* v = pair < q_pairs ? q + static_cast<std::size_t>(t) * q_dim + 2 * pair
                            : k + static_cast<std::size_t>(t) * kv_dim + 2 * (pair - q_pairs);
  const int i = pair < q_pairs ? 2 * pair : 2 * (pair - q_pairs);
  rope_pair(v, i % head_dim, pos[t], head_dim, theta);
}

// `tokens` tokens, each with its position in pos[].
inline void launch_rope(float* q, float* k, const int* pos, int tokens, int q_dim, int kv_dim,
                        int head_dim, float theta) {
  const unsigned threads = 128, pairs = static_cast<unsigned>(q_dim / 2 + kv_dim / 2);
  KVS_LAUNCH(rope_kernel,
             simt::Dim3((pairs + threads - 1) / threads, static_cast<unsigned>(tokens)),
             simt::Dim3(threads), 0, q, k, pos, q_dim, kv_dim, head_dim, theta);
}

KVS_KERNELS_END

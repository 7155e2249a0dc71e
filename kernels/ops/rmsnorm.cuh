// RMSNorm, one block per row: out[r][i] = w[i] * (x[r][i] / sqrt(mean(x[r]^2) + eps)).
// CPU twin: cpu::rmsnorm (engine/backend/cpu/cpu_ops.h).
#pragma once

#include "kernels/common/reduce.cuh"

KVS_KERNELS_BEGIN

KVS_GLOBAL void rmsnorm_kernel(float* out, const float* x, const float* w, int n, float eps) {
  KVS_SHARED_ARRAY(float, slots, 32);
  const std::size_t row = static_cast<std::size_t>(simt::bid_x()) * static_cast<std::size_t>(n);
  float ss = 0.0f;
  for (int i = static_cast<int>(simt::tid_x()); i < n; i += static_cast<int>(simt::bdim_x()))
    ss += x[row + i] * x[row + i];
  ss = block_sum(ss, slots);
  const float scale = simt::rsqrt(ss / static_cast<float>(n) + eps);
  for (int i = static_cast<int>(simt::tid_x()); i < n; i += static_cast<int>(simt::bdim_x()))
    out[row + i] = w[i] * (scale * x[row + i]);
}

// `rows` rows of n; threads per block a multiple of 32 (the reduction's warps are whole).
inline void launch_rmsnorm(float* out, const float* x, const float* w, int rows, int n, float eps,
                           unsigned threads = 256) {
  KVS_LAUNCH(rmsnorm_kernel, simt::Dim3(static_cast<unsigned>(rows)), simt::Dim3(threads), 0, out,
             x, w, n, eps);
}

KVS_KERNELS_END

// The projections' matmul, fp32: out[t][r] = W[r] . x[t] for the m input rows of a step, one warp
// per (output row, input row), lanes striding over n, a shuffle tree for the sum. The simple
// form the emulator runs; the GPU backend's matmuls are meant for cuBLAS (not written yet).
// CPU twin: cpu::matmul_batch.
#pragma once

#include "kernels/common/reduce.cuh"

KVS_KERNELS_BEGIN

KVS_GLOBAL void matmul_kernel(float* out, const float* x, const float* w, int n, int d) {
  const int warps = static_cast<int>(simt::bdim_x() / 32u);
  const int r = static_cast<int>(simt::bid_x()) * warps + static_cast<int>(simt::tid_x() / 32u);
  const int t = static_cast<int>(simt::bid_y());
  if (r >= d) return;  // whole warps leave together
  const float* wr = w + static_cast<long>(r) * n;
  const float* xt = x + static_cast<long>(t) * n;
  float s = 0.0f;
  for (int j = static_cast<int>(simt::lane()); j < n; j += 32) s += wr[j] * xt[j];
  s = warp_reduce<false>(s);
  if (simt::lane() == 0) out[static_cast<long>(t) * d + r] = s;
}

// m input rows of n, d output rows; 4 warps per block.
inline void launch_matmul(float* out, const float* x, const float* w, int m, int n, int d) {
  const unsigned warps = 4;
  KVS_LAUNCH(matmul_kernel,
             simt::Dim3((static_cast<unsigned>(d) + warps - 1) / warps, static_cast<unsigned>(m)),
             simt::Dim3(32 * warps), 0, out, x, w, n, d);
}

KVS_KERNELS_END

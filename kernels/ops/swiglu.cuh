// SwiGLU's gate: hb[i] = silu(hb[i]) * hb2[i], silu(v) = v / (1 + e^-v); a grid-stride loop.
// CPU twin: cpu::swiglu.
#pragma once

#include "kernels/common/simt_api.cuh"

KVS_KERNELS_BEGIN

KVS_GLOBAL void swiglu_kernel(float* hb, const float* hb2, long n) {
  const long stride = static_cast<long>(simt::gdim_x()) * simt::bdim_x();
  for (long i = static_cast<long>(simt::bid_x()) * simt::bdim_x() + simt::tid_x(); i < n;
       i += stride) {
    const float v = hb[i];
    hb[i] = v / (1.0f + expf(-v)) * hb2[i];
  }
}

inline void launch_swiglu(float* hb, const float* hb2, long n, unsigned blocks = 64,
                          unsigned threads = 256) {
  KVS_LAUNCH(swiglu_kernel, simt::Dim3(blocks), simt::Dim3(threads), 0, hb, hb2, n);
}

KVS_KERNELS_END

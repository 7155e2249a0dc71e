// Greedy sampling on the device: out[r] = the index of row r's largest logit, the lowest index
// among equals (as std::max_element). One block per row.
// CPU twin: std::max_element over the row (engine/model/sampler.cpp's greedy path).
#pragma once

#include "kernels/common/simt_api.cuh"

KVS_KERNELS_BEGIN

KVS_DEVICE void take_better(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

KVS_GLOBAL void argmax_kernel(int* out, const float* logits, int n) {
  KVS_SHARED_ARRAY(float, warp_v, 32);
  KVS_SHARED_ARRAY(int, warp_i, 32);
  const float* row = logits + static_cast<std::size_t>(simt::bid_x()) * static_cast<std::size_t>(n);
  float v = -INFINITY;
  int i = n;  // past the end: loses every tie
  for (int j = static_cast<int>(simt::tid_x()); j < n; j += static_cast<int>(simt::bdim_x()))
    take_better(v, i, row[j], j);
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = simt::shfl_xor(v, o);
    const int oi = simt::shfl_xor(i, o);
    take_better(v, i, ov, oi);
  }
  if (simt::lane() == 0) {
    warp_v[simt::tid_x() / 32u] = v;
    warp_i[simt::tid_x() / 32u] = i;
  }
  simt::sync_block();
  if (simt::tid_x() < 32u) {
    const unsigned warps = (simt::bdim_x() + 31u) / 32u;
    v = simt::tid_x() < warps ? warp_v[simt::tid_x()] : -INFINITY;
    i = simt::tid_x() < warps ? warp_i[simt::tid_x()] : n;
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = simt::shfl_xor(v, o);
      const int oi = simt::shfl_xor(i, o);
      take_better(v, i, ov, oi);
    }
    if (simt::tid_x() == 0) out[simt::bid_x()] = i;
  }
}

inline void launch_argmax(int* out, const float* logits, int rows, int n, unsigned threads = 256) {
  KVS_LAUNCH(argmax_kernel, simt::Dim3(static_cast<unsigned>(rows)), simt::Dim3(threads), 0, out,
             logits, n);
}

KVS_KERNELS_END

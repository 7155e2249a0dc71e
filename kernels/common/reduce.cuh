// Block-wide reductions for kernels whose block is a whole number of warps: a butterfly of warp
// shuffles, one shared slot per warp, then the first warp reduces the slots. Every thread gets
// the result. `slots` is a KVS_SHARED_ARRAY of at least 32 floats, free again on return.
#pragma once

#include "kernels/common/simt_api.cuh"

KVS_KERNELS_BEGIN

template <bool kMax>
KVS_DEVICE float warp_reduce(float v) {
  for (int o = 16; o > 0; o >>= 1) {
    const float other = simt::shfl_xor(v, o);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  return v;
}

template <bool kMax>
KVS_DEVICE float block_reduce(float v, float* slots) {
  const unsigned warps = (simt::bdim_x() + 31u) / 32u;
  v = warp_reduce<kMax>(v);
  if (simt::lane() == 0) slots[simt::tid_x() / 32u] = v;
  simt::sync_block();
  if (simt::tid_x() < 32u) {
    float w = simt::tid_x() < warps ? slots[simt::tid_x()] : (kMax ? -INFINITY : 0.0f);
    w = warp_reduce<kMax>(w);
    if (simt::tid_x() == 0) slots[0] = w;
  }
  simt::sync_block();
  const float out = slots[0];
  simt::sync_block();  // every thread has read slots[0] before the next reduction writes it
  return out;
}

KVS_DEVICE float block_sum(float v, float* slots) {
  return block_reduce<false>(v, slots);
}
KVS_DEVICE float block_max(float v, float* slots) {
  return block_reduce<true>(v, slots);
}

KVS_KERNELS_END

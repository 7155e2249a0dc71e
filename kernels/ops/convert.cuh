// Activations to cuBLAS's 16-bit input types: out[i] = x[i] as IEEE binary16 or bfloat16 bits,
// rounded to nearest even, grid-stride. The GEMMs with fp16/bf16 weights take their other operand
// in the same type (cublasGemmEx with fp32 accumulation). CPU twin: quant::f32_to_f16 /
// quant::f32_to_bf16 (equal on every finite value in range; beyond binary16's range CUDA gives
// infinity where kvscope's KV encoder saturates).
#pragma once

#include "kernels/common/simt_api.cuh"

KVS_KERNELS_BEGIN

KVS_GLOBAL void to_16bit_kernel(std::uint16_t* out, const float* x, long n, bool bf16) {
  const long stride = static_cast<long>(simt::gdim_x()) * simt::bdim_x();
  for (long i = static_cast<long>(simt::bid_x()) * simt::bdim_x() + simt::tid_x(); i < n;
       i += stride)
    out[i] = bf16 ? simt::bf16_bits(x[i]) : simt::f16_bits(x[i]);
}

inline void launch_to_16bit(std::uint16_t* out, const float* x, long n, bool bf16) {
  const long blocks = (n + 255) / 256;
  KVS_LAUNCH(to_16bit_kernel,
             simt::Dim3(static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 256 ? 256 : blocks))),
             simt::Dim3(256), 0, out, x, n, bf16);
}

KVS_KERNELS_END

// nvcc translation unit for decode_attention.cuh: compiles its kernels for the GPU (sm_80, sm_90).
#include "kernels/ops/decode_attention.cuh"

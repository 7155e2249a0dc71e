// nvcc translation unit for paged_attention.cuh: compiles its kernel for the GPU (sm_80, sm_90).
#include "kernels/ops/paged_attention.cuh"

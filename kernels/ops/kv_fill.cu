// nvcc translation unit for kv_fill.cuh: compiles its kernel for the GPU (sm_80, sm_90).
#include "kernels/ops/kv_fill.cuh"

// nvcc translation unit for kv_rotate.cuh: compiles its kernel for the GPU (sm_80, sm_90).
#include "kernels/ops/kv_rotate.cuh"

// nvcc translation unit for kv_kivi.cuh: compiles its kernels for the GPU (sm_80, sm_90).
#include "kernels/ops/kv_kivi.cuh"

// nvcc translation unit for rmsnorm.cuh: compiles its kernel for the GPU (sm_80, sm_90).
#include "kernels/ops/rmsnorm.cuh"

// nvcc translation unit for matmul.cuh: compiles its kernel for the GPU (sm_80, sm_90).
#include "kernels/ops/matmul.cuh"

// nvcc translation unit for rope.cuh: compiles its kernel for the GPU (sm_80, sm_90).
#include "kernels/ops/rope.cuh"

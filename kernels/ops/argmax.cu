// nvcc translation unit for argmax.cuh: compiles its kernel for the GPU (sm_80, sm_90).
#include "kernels/ops/argmax.cuh"

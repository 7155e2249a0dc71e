// nvcc translation unit for convert.cuh: compiles its kernel for the GPU (sm_80, sm_90).
#include "kernels/ops/convert.cuh"

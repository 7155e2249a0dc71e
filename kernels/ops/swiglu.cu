// nvcc translation unit for swiglu.cuh: compiles its kernel for the GPU (sm_80, sm_90).
#include "kernels/ops/swiglu.cuh"

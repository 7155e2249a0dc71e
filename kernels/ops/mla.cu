// nvcc translation unit for mla.cuh: compiles its kernels for the GPU (sm_80, sm_90).
#include "kernels/ops/mla.cuh"

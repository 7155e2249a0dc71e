// Host stand-ins for the CUDA runtime and cuBLAS calls kvscope's CUDA backend makes, with the real
// prototypes (checked against the CUDA Toolkit's headers when they are present: cuda_api_sim.cpp),
// so the backend's code (kernels/backend/device_ops_body.inc) compiles unchanged against either
// and runs here, on the emulated device.
//
// Device memory is host memory that only these calls hand out: every allocation is recorded, and
// each call checks its pointers the way a GPU would fail on them, but at once and with a message:
// a cudaMemcpy whose kind names the wrong side (a host pointer passed as device memory, or the
// reverse) or that runs past an allocation returns cudaErrorInvalidValue; freeing something that
// is not an allocation returns cudaErrorInvalidValue; a cuBLAS operand that is not device memory
// for the whole extent its leading dimension implies throws sim::SimError (on a GPU: an illegal
// address, reported later at some synchronization). The emulated device has a capacity
// (set_device_capacity) so running out of memory can be tested.
//
// cublasGemmEx follows cuBLAS's column-major definition exactly (op(A) is m x k, op(B) k x n, C
// m x n, leading dimensions in elements), validates its arguments as cuBLAS documents
// (CUBLAS_STATUS_INVALID_VALUE, _NOT_SUPPORTED, _NOT_INITIALIZED) and computes in fp32 from fp32,
// fp16 or bf16 inputs: the row-major to column-major mapping of the backend is tested against it.
// Everything runs synchronously on the calling thread.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(KVSCOPE_CUDA_HEADERS)
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#else
#include "kernels/sim/cuda_decls.h"
using kvscope::cuda_decl::cublasComputeType_t;
using kvscope::cuda_decl::cublasContext;
using kvscope::cuda_decl::cublasGemmAlgo_t;
using kvscope::cuda_decl::cublasHandle_t;
using kvscope::cuda_decl::cublasOperation_t;
using kvscope::cuda_decl::cublasStatus_t;
using kvscope::cuda_decl::cudaDataType;
using kvscope::cuda_decl::cudaError_t;
using kvscope::cuda_decl::cudaEvent_t;
using kvscope::cuda_decl::cudaMemcpyKind;
using kvscope::cuda_decl::cudaStream_t;
using kvscope::cuda_decl::CUevent_st;
using kvscope::cuda_decl::CUstream_st;
using enum kvscope::cuda_decl::cudaError_t;
using enum kvscope::cuda_decl::cudaMemcpyKind;
using enum kvscope::cuda_decl::cudaDataType_t;
using enum kvscope::cuda_decl::cublasStatus_t;
using enum kvscope::cuda_decl::cublasOperation_t;
using enum kvscope::cuda_decl::cublasComputeType_t;
using enum kvscope::cuda_decl::cublasGemmAlgo_t;
#endif

namespace kvscope::cuda_sim {

// The CUDA runtime (cuda_runtime_api.h). One emulated device, always present.
cudaError_t cudaGetDeviceCount(int* count);
const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetLastError(void);
cudaError_t cudaMalloc(void** devPtr, size_t size);
cudaError_t cudaFree(void* devPtr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemset(void* devPtr, int value, size_t count);
cudaError_t cudaDeviceSynchronize(void);
// Events: the host clock at the moment of the record (every call has already completed then).
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);

// cuBLAS (cublas_api.h; cublas_v2.h names cublasCreate and cublasDestroy after these).
cublasStatus_t cublasCreate_v2(cublasHandle_t* handle);
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle);
const char* cublasGetStatusString(cublasStatus_t status);
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo);

// Emulator-only: the device's memory now, for leak checks and out-of-memory tests.
struct DeviceMemory {
  std::size_t bytes_in_use = 0;
  std::size_t allocations = 0;
  std::size_t capacity = 0;
};
DeviceMemory device_memory();
// The emulated device's capacity in bytes (default 16 GiB); cudaMalloc beyond it fails with
// cudaErrorMemoryAllocation. Returns the previous capacity.
std::size_t set_device_capacity(std::size_t bytes);
// Whether [p, p + bytes) lies inside one live allocation.
bool is_device_range(const void* p, std::size_t bytes);

}  // namespace kvscope::cuda_sim

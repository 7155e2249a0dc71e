// DeviceOps on a real GPU: device_ops_body.inc compiled by nvcc against the CUDA runtime and
// cuBLAS, the kernels launched with <<<...>>>. Built when nvcc is found (kernels/CMakeLists.txt).
// No machine of this project has a GPU: here make_cuda_device_ops() runs only as far as the
// runtime's answer that there is no device (tests/cli: the fallback), and the body's every line
// runs, compiled by g++, on the emulated device instead (device_ops_emulated.cpp).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <functional>
#include <string>

#include "kernels/backend/device_ops.h"
#include "kernels/ops/argmax.cuh"
#include "kernels/ops/convert.cuh"
#include "kernels/ops/decode_attention.cuh"
#include "kernels/ops/kv_fill.cuh"
#include "kernels/ops/kv_kivi.cuh"
#include "kernels/ops/kv_rotate.cuh"
#include "kernels/ops/kv_write.cuh"
#include "kernels/ops/mla.cuh"
#include "kernels/ops/paged_attention.cuh"
#include "kernels/ops/rmsnorm.cuh"
#include "kernels/ops/rope.cuh"
#include "kernels/ops/swiglu.cuh"

namespace kvscope::device {
namespace {

namespace rt {
using ::cublasCreate_v2;
using ::cublasDestroy_v2;
using ::cublasGemmEx;
using ::cublasGetStatusString;
using ::cudaDeviceSynchronize;
using ::cudaEventCreate;
using ::cudaEventDestroy;
using ::cudaEventElapsedTime;
using ::cudaEventRecord;
using ::cudaEventSynchronize;
using ::cudaFree;
using ::cudaGetErrorString;
using ::cudaGetLastError;
using ::cudaMalloc;
using ::cudaMemcpy;
}  // namespace rt

#include "kernels/backend/device_ops_body.inc"

}  // namespace

std::unique_ptr<DeviceOps> make_cuda_device_ops(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    *why = e != cudaSuccess ? cudaGetErrorString(e) : "the runtime found no CUDA device";
    cudaGetLastError();  // clear it
    return nullptr;
  }
  int device = 0, major = 0, minor = 0;
  cudaError_t q = cudaGetDevice(&device);
  if (q == cudaSuccess)
    q = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (q == cudaSuccess)
    q = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (q != cudaSuccess) {
    *why = std::string("querying the device: ") + cudaGetErrorString(q);
    cudaGetLastError();
    return nullptr;
  }
  if (major < 8) {
    *why = "device " + std::to_string(device) + " has compute capability " + std::to_string(major) +
           "." + std::to_string(minor) + "; kvscope's kernels are built for 8.0 and later";
    return nullptr;
  }
  try {
    return std::make_unique<DeviceOpsImpl>("cuda");
  } catch (const DeviceError& err) {
    *why = err.what();
    return nullptr;
  }
}

std::string cuda_device_name() {
  int device = 0;
  cudaDeviceProp p{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    cudaGetLastError();  // clear it
    return "";
  }
  return p.name;
}

}  // namespace kvscope::device

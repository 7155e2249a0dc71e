// See cuda_api_sim.h.
#include "kernels/sim/cuda_api_sim.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/quant/float_formats.h"
#include "kernels/sim/simt.h"

#if defined(KVSCOPE_CUDA_HEADERS)
// Each stand-in has exactly the prototype of the real call: the cast selects, among the real
// overloads, the one whose type is the stand-in's, and fails to compile when there is none.
#define KVS_SAME_PROTOTYPE(name)                                                           \
  static_assert(                                                                           \
      std::is_same_v<decltype(static_cast<decltype(&::kvscope::cuda_sim::name)>(&::name)), \
                     decltype(&::kvscope::cuda_sim::name)>,                                \
      #name " has the real prototype")
KVS_SAME_PROTOTYPE(cudaGetDeviceCount);
KVS_SAME_PROTOTYPE(cudaGetErrorString);
KVS_SAME_PROTOTYPE(cudaGetLastError);
KVS_SAME_PROTOTYPE(cudaMalloc);
KVS_SAME_PROTOTYPE(cudaFree);
KVS_SAME_PROTOTYPE(cudaMemcpy);
KVS_SAME_PROTOTYPE(cudaMemset);
KVS_SAME_PROTOTYPE(cudaDeviceSynchronize);
KVS_SAME_PROTOTYPE(cudaEventCreate);
KVS_SAME_PROTOTYPE(cudaEventRecord);
KVS_SAME_PROTOTYPE(cudaEventSynchronize);
KVS_SAME_PROTOTYPE(cudaEventElapsedTime);
KVS_SAME_PROTOTYPE(cudaEventDestroy);
KVS_SAME_PROTOTYPE(cublasCreate_v2);
KVS_SAME_PROTOTYPE(cublasDestroy_v2);
KVS_SAME_PROTOTYPE(cublasGetStatusString);
KVS_SAME_PROTOTYPE(cublasGemmEx);
#undef KVS_SAME_PROTOTYPE
#endif

namespace kvscope::cuda_sim {
namespace {

constexpr std::size_t kAlign = 256;  // cudaMalloc's alignment

struct Device {
  std::mutex mu;
  std::map<std::uintptr_t, std::size_t> allocations;  // start -> bytes
  std::size_t bytes_in_use = 0;
  std::size_t capacity = std::size_t{16} << 30;
};

Device& device() {
  static Device d;
  return d;
}

thread_local cudaError_t last_error = cudaSuccess;

cudaError_t fail(cudaError_t e) {
  last_error = e;
  return e;
}

// Whether [p, p + bytes) lies inside one allocation; the caller holds the lock.
bool inside_locked(const Device& d, const void* p, std::size_t bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = d.allocations.upper_bound(a);
  if (it == d.allocations.begin()) return false;
  --it;
  return a >= it->first && a - it->first <= it->second && bytes <= it->second - (a - it->first) &&
         (bytes > 0 || a < it->first + it->second);
}

// Whether p points into any allocation (the device side of a copy).
bool on_device_locked(const Device& d, const void* p) {
  return inside_locked(d, p, 1);
}

struct Event {
  static constexpr std::uint32_t kLive = 0x6B766576u;  // "kvev"
  std::uint32_t magic = kLive;
  bool recorded = false;
  std::chrono::steady_clock::time_point at;
};

Event* live(cudaEvent_t e) {
  auto* event = reinterpret_cast<Event*>(e);
  return event != nullptr && event->magic == Event::kLive ? event : nullptr;
}

struct Handle {
  static constexpr std::uint32_t kLive = 0x6B76626Cu;  // "kvbl"
  std::uint32_t magic = kLive;
};

Handle* live(cublasHandle_t h) {
  auto* handle = reinterpret_cast<Handle*>(h);
  return handle != nullptr && handle->magic == Handle::kLive ? handle : nullptr;
}

std::size_t element_bytes(cudaDataType t) {
  return t == CUDA_R_32F ? 4 : 2;
}

// Every binary16 code's value (256 KiB, built once).
const float* f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (std::size_t i = 0; i < t.size(); ++i)
      t[i] = quant::f16_to_f32(static_cast<std::uint16_t>(i));
    return t;
  }();
  return table.data();
}

// out[q] = element first + q * stride of a device array of type t, as fp32, for q < count.
void load(const void* base, cudaDataType t, std::size_t first, std::size_t stride, int count,
          float* out) {
  if (t == CUDA_R_32F) {
    const float* f = static_cast<const float*>(base) + first;
    for (int q = 0; q < count; ++q) out[q] = f[q * stride];
    return;
  }
  const std::uint16_t* h = static_cast<const std::uint16_t*>(base) + first;
  if (t == CUDA_R_16F) {
    const float* table = f16_table();
    for (int q = 0; q < count; ++q) out[q] = table[h[q * stride]];
    return;
  }
  for (int q = 0; q < count; ++q) {
    const std::uint32_t u = static_cast<std::uint32_t>(h[q * stride]) << 16;
    std::memcpy(&out[q], &u, 4);
  }
}

// a . b over k elements in eight interleaved fp32 partial sums (cuBLAS's order is its own too).
float dot(const float* a, const float* b, int k) {
  float part[8] = {};
  int p = 0;
  for (; p + 8 <= k; p += 8) {
    for (int l = 0; l < 8; ++l) part[l] += a[p + l] * b[p + l];
  }
  float acc =
      ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  for (; p < k; ++p) acc += a[p] * b[p];
  return acc;
}

// Bytes of a column-major operand of `rows` x `cols` (as stored) with leading dimension ld.
std::size_t extent(int rows, int cols, int ld, cudaDataType t) {
  if (rows == 0 || cols == 0) return 0;
  return (static_cast<std::size_t>(cols - 1) * static_cast<std::size_t>(ld) +
          static_cast<std::size_t>(rows)) *
         element_bytes(t);
}

void require_device(const char* operand, const void* p, std::size_t bytes) {
  if (bytes == 0) return;
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mu);
  if (!inside_locked(d, p, bytes)) {
    throw sim::SimError(std::string("cublasGemmEx: operand ") + operand + " (" +
                        std::to_string(bytes) +
                        " bytes from its pointer, as its leading dimension implies) is not "
                        "inside one device allocation: on a GPU, an illegal memory access");
  }
}

}  // namespace

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return fail(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    default:
      return "unrecognized error code";
  }
}

cudaError_t cudaGetLastError(void) {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  if (devPtr == nullptr) return fail(cudaErrorInvalidValue);
  *devPtr = nullptr;
  if (size == 0) return cudaSuccess;
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mu);
  if (d.bytes_in_use > d.capacity || size > d.capacity - d.bytes_in_use)
    return fail(cudaErrorMemoryAllocation);
  void* p = std::aligned_alloc(kAlign, (size + kAlign - 1) / kAlign * kAlign);
  if (p == nullptr) return fail(cudaErrorMemoryAllocation);
  std::memset(p, 0xFF, size);  // like the emulator's shared memory: uninitialized reads show
  d.allocations[reinterpret_cast<std::uintptr_t>(p)] = size;
  d.bytes_in_use += size;
  *devPtr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* devPtr) {
  if (devPtr == nullptr) return cudaSuccess;
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mu);
  const auto it = d.allocations.find(reinterpret_cast<std::uintptr_t>(devPtr));
  if (it == d.allocations.end()) return fail(cudaErrorInvalidValue);
  d.bytes_in_use -= it->second;
  d.allocations.erase(it);
  std::free(devPtr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  if (count == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return fail(cudaErrorInvalidValue);
  Device& d = device();
  {
    std::lock_guard<std::mutex> lock(d.mu);
    const bool dst_dev = on_device_locked(d, dst), src_dev = on_device_locked(d, src);
    bool want_dst = false, want_src = false;
    switch (kind) {
      case cudaMemcpyHostToHost:
        break;
      case cudaMemcpyHostToDevice:
        want_dst = true;
        break;
      case cudaMemcpyDeviceToHost:
        want_src = true;
        break;
      case cudaMemcpyDeviceToDevice:
        want_dst = want_src = true;
        break;
      case cudaMemcpyDefault:
        want_dst = dst_dev;
        want_src = src_dev;
        break;
      default:
        return fail(cudaErrorInvalidMemcpyDirection);
    }
    if (want_dst != dst_dev || want_src != src_dev) return fail(cudaErrorInvalidValue);
    if ((want_dst && !inside_locked(d, dst, count)) || (want_src && !inside_locked(d, src, count)))
      return fail(cudaErrorInvalidValue);
  }
  std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  if (count == 0) return cudaSuccess;
  Device& d = device();
  {
    std::lock_guard<std::mutex> lock(d.mu);
    if (!inside_locked(d, devPtr, count)) return fail(cudaErrorInvalidValue);
  }
  std::memset(devPtr, value, count);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  return cudaSuccess;  // every call ran to completion before it returned
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  if (event == nullptr) return fail(cudaErrorInvalidValue);
  *event = reinterpret_cast<cudaEvent_t>(new Event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t /*stream*/) {
  Event* e = live(event);
  if (e == nullptr) return fail(cudaErrorInvalidResourceHandle);
  e->recorded = true;
  e->at = std::chrono::steady_clock::now();
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return live(event) != nullptr ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  const Event* a = live(start);
  const Event* b = live(end);
  if (ms == nullptr || a == nullptr || b == nullptr) return fail(cudaErrorInvalidResourceHandle);
  // Never recorded: the runtime documents cudaErrorInvalidResourceHandle for this.
  if (!a->recorded || !b->recorded) return fail(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  Event* e = live(event);
  if (e == nullptr) return fail(cudaErrorInvalidResourceHandle);
  e->magic = 0;
  delete e;
  return cudaSuccess;
}

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = reinterpret_cast<cublasHandle_t>(new (std::nothrow) Handle);
  return *handle != nullptr ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  Handle* h = live(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->magic = 0;
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
    default:
      return "unknown error";
  }
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
  if (live(handle) == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto op_ok = [](cublasOperation_t op) {
    return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
  };
  if (!op_ok(transa) || !op_ok(transb) || m < 0 || n < 0 || k < 0 || alpha == nullptr ||
      beta == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;  // real data: C == T
  // Stored shapes: A is m x k (N) or k x m (T); B is k x n (N) or n x k (T).
  const int a_rows = ta ? k : m, a_cols = ta ? m : k;
  const int b_rows = tb ? n : k, b_cols = tb ? k : n;
  if (lda < (a_rows > 1 ? a_rows : 1) || ldb < (b_rows > 1 ? b_rows : 1) || ldc < (m > 1 ? m : 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  // fp32 compute with fp32 output, from fp32 or matching 16-bit inputs (cuBLAS's table for
  // CUBLAS_COMPUTE_32F has more rows; these are the ones kvscope uses).
  const bool types_ok = computeType == CUBLAS_COMPUTE_32F && Ctype == CUDA_R_32F &&
                        Atype == Btype &&
                        (Atype == CUDA_R_32F || Atype == CUDA_R_16F || Atype == CUDA_R_16BF);
  if (!types_ok || algo != CUBLAS_GEMM_DEFAULT) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const float a_scale = *static_cast<const float*>(alpha);
  const float b_scale = *static_cast<const float*>(beta);
  if (k > 0 && a_scale != 0.0f) {
    require_device("A", A, extent(a_rows, a_cols, lda, Atype));
    require_device("B", B, extent(b_rows, b_cols, ldb, Btype));
  }
  require_device("C", C, extent(m, n, ldc, Ctype));
  // op(B) is decoded to fp32 once ([n][k]: n is small in the backend's calls), then each row of
  // op(A) once, and the dot products run in fp32: fast enough for tests on SmolLM2's weights.
  std::vector<float> bcols(static_cast<std::size_t>(n) * k), arow(static_cast<std::size_t>(k));
  const auto sk = static_cast<std::size_t>(k);
  for (int j = 0; j < n; ++j) {
    // Column j of op(B): B's row j (T) or column j (N).
    const auto uj = static_cast<std::size_t>(j);
    load(B, Btype, tb ? uj : uj * ldb, tb ? static_cast<std::size_t>(ldb) : 1, k,
         bcols.data() + uj * sk);
  }
  auto* c = static_cast<float*>(C);
  for (int i = 0; i < m; ++i) {
    // Row i of op(A): A's column i (T) or row i (N).
    const auto ui = static_cast<std::size_t>(i);
    load(A, Atype, ta ? ui * lda : ui, ta ? 1 : static_cast<std::size_t>(lda), k, arow.data());
    for (int j = 0; j < n; ++j) {
      const float acc = dot(arow.data(), bcols.data() + static_cast<std::size_t>(j) * k, k);
      float& out = c[static_cast<std::size_t>(j) * ldc + i];
      // beta == 0: C is not read (it may hold NaN), as BLAS defines.
      out = b_scale == 0.0f ? a_scale * acc : a_scale * acc + b_scale * out;
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

DeviceMemory device_memory() {
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mu);
  return {d.bytes_in_use, d.allocations.size(), d.capacity};
}

std::size_t set_device_capacity(std::size_t bytes) {
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mu);
  const std::size_t old = d.capacity;
  d.capacity = bytes;
  return old;
}

bool is_device_range(const void* p, std::size_t bytes) {
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mu);
  return inside_locked(d, p, bytes);
}

}  // namespace kvscope::cuda_sim

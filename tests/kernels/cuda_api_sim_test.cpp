// The CUDA runtime and cuBLAS stand-ins (kernels/sim/cuda_api_sim.h) that let the CUDA backend's
// code run here: their types match the real headers; cublasGemmEx follows cuBLAS's column-major
// definition for every transpose and leading dimension and validates as cuBLAS documents; the
// backend's row-major mapping onto it equals the CPU's matmul; device memory catches the mistakes
// a GPU would fault on (wrong copy direction, overruns, double frees, an operand past its
// allocation); the 16-bit conversion kernel equals the CPU's encoder.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/quant/float_formats.h"
#include "kernels/backend/device_ops.h"
#include "kernels/ops/convert.cuh"
#include "kernels/sim/cuda_api_sim.h"
#include "kernels/sim/cuda_decls.h"
#include "kernels/sim/simt.h"
#include "tests/kernels/kernel_test_support.h"
#include "tests/quant/kv_test_support.h"

namespace kvscope {
namespace {

namespace cs = cuda_sim;
namespace decl = cuda_decl;

#if defined(KVSCOPE_CUDA_HEADERS)
// cuda_decls.h (used where the Toolkit's headers are absent) has the real values.
static_assert(int(decl::cudaErrorInvalidValue) == int(::cudaErrorInvalidValue));
static_assert(int(decl::cudaErrorMemoryAllocation) == int(::cudaErrorMemoryAllocation));
static_assert(int(decl::cudaErrorInvalidDevicePointer) == int(::cudaErrorInvalidDevicePointer));
static_assert(int(decl::cudaErrorInvalidMemcpyDirection) == int(::cudaErrorInvalidMemcpyDirection));
static_assert(int(decl::cudaErrorInsufficientDriver) == int(::cudaErrorInsufficientDriver));
static_assert(int(decl::cudaErrorNoDevice) == int(::cudaErrorNoDevice));
static_assert(int(decl::cudaMemcpyHostToDevice) == int(::cudaMemcpyHostToDevice));
static_assert(int(decl::cudaMemcpyDeviceToHost) == int(::cudaMemcpyDeviceToHost));
static_assert(int(decl::cudaMemcpyDeviceToDevice) == int(::cudaMemcpyDeviceToDevice));
static_assert(int(decl::cudaMemcpyDefault) == int(::cudaMemcpyDefault));
static_assert(int(decl::CUDA_R_16F) == int(::CUDA_R_16F));
static_assert(int(decl::CUDA_R_16BF) == int(::CUDA_R_16BF));
static_assert(int(decl::CUDA_R_32F) == int(::CUDA_R_32F));
static_assert(int(decl::CUBLAS_STATUS_NOT_INITIALIZED) == int(::CUBLAS_STATUS_NOT_INITIALIZED));
static_assert(int(decl::CUBLAS_STATUS_ALLOC_FAILED) == int(::CUBLAS_STATUS_ALLOC_FAILED));
static_assert(int(decl::CUBLAS_STATUS_INVALID_VALUE) == int(::CUBLAS_STATUS_INVALID_VALUE));
static_assert(int(decl::CUBLAS_STATUS_EXECUTION_FAILED) == int(::CUBLAS_STATUS_EXECUTION_FAILED));
static_assert(int(decl::CUBLAS_STATUS_NOT_SUPPORTED) == int(::CUBLAS_STATUS_NOT_SUPPORTED));
static_assert(int(decl::CUBLAS_OP_T) == int(::CUBLAS_OP_T));
static_assert(int(decl::CUBLAS_COMPUTE_32F) == int(::CUBLAS_COMPUTE_32F));
static_assert(int(decl::CUBLAS_GEMM_DEFAULT) == int(::CUBLAS_GEMM_DEFAULT));
#endif

// A device array of n T, filled from host values.
template <class T>
T* upload(const std::vector<T>& host) {
  void* p = nullptr;
  EXPECT_EQ(cs::cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cs::cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return static_cast<T*>(p);
}

template <class T>
std::vector<T> download(const T* dev, std::size_t n) {
  std::vector<T> host(n);
  EXPECT_EQ(cs::cudaMemcpy(host.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

using test::randn;

struct Blas {
  cublasHandle_t h = nullptr;
  Blas() { EXPECT_EQ(cs::cublasCreate_v2(&h), CUBLAS_STATUS_SUCCESS); }
  ~Blas() { cs::cublasDestroy_v2(h); }
};

// C = alpha op(A) op(B) + beta C by the textbook, column-major, every transpose and padded
// leading dimensions, in fp32 and with 16-bit inputs.
TEST(CublasStandIn, GemmExFollowsTheColumnMajorDefinition) {
  Blas blas;
  const int m = 5, n = 3, k = 7;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      for (cudaDataType type : {CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF}) {
        const int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k,
                  b_cols = tb ? k : n;
        const int lda = a_rows + 2, ldb = b_rows + 1, ldc = m + 3;
        std::vector<float> a = randn(static_cast<std::size_t>(lda) * a_cols, 1),
                           b = randn(static_cast<std::size_t>(ldb) * b_cols, 2),
                           c = randn(static_cast<std::size_t>(ldc) * n, 3);
        // What the device holds: the 16-bit codes (and their fp32 values, for the reference).
        std::vector<std::uint16_t> a16(a.size()), b16(b.size());
        auto round16 = [&](std::vector<float>& v, std::vector<std::uint16_t>& codes) {
          for (std::size_t i = 0; i < v.size(); ++i) {
            codes[i] = type == CUDA_R_16F ? quant::f32_to_f16(v[i]) : quant::f32_to_bf16(v[i]);
            v[i] = type == CUDA_R_16F ? quant::f16_to_f32(codes[i]) : quant::bf16_to_f32(codes[i]);
          }
        };
        void *da = nullptr, *db = nullptr;
        if (type == CUDA_R_32F) {
          da = upload(a);
          db = upload(b);
        } else {
          round16(a, a16);
          round16(b, b16);
          da = upload(a16);
          db = upload(b16);
        }
        float* dc = upload(c);
        const float alpha = 1.5f, beta = -0.5f;
        ASSERT_EQ(
            cs::cublasGemmEx(blas.h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                             m, n, k, &alpha, da, type, lda, db, type, ldb, &beta, dc, CUDA_R_32F,
                             ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
        const std::vector<float> got = download(dc, c.size());
        for (int j = 0; j < n; ++j) {
          for (int i = 0; i < m; ++i) {
            double acc = 0.0;
            for (int p = 0; p < k; ++p) {
              const float av = ta ? a[i * lda + p] : a[p * lda + i];
              const float bv = tb ? b[p * ldb + j] : b[j * ldb + p];
              acc += double(av) * bv;
            }
            const double want = alpha * acc + beta * c[j * ldc + i];
            EXPECT_NEAR(got[j * ldc + i], want, 1e-4 * (1 + std::fabs(want)))
                << "ta=" << ta << " tb=" << tb << " type=" << int(type) << " C(" << i << "," << j
                << ")";
          }
          for (int i = m; i < ldc; ++i)
            EXPECT_EQ(got[j * ldc + i], c[j * ldc + i]) << "padding of C written";
        }
        for (void* p : {da, db, static_cast<void*>(dc)}) EXPECT_EQ(cs::cudaFree(p), cudaSuccess);
      }
    }
  }
}

TEST(CublasStandIn, BetaZeroDoesNotReadC) {
  Blas blas;
  float* a = upload(std::vector<float>{2.0f});
  float* b = upload(std::vector<float>{3.0f});
  float* c = upload(std::vector<float>{NAN});
  const float one = 1.0f, zero = 0.0f;
  ASSERT_EQ(cs::cublasGemmEx(blas.h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, a, CUDA_R_32F, 1, b,
                             CUDA_R_32F, 1, &zero, c, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(download(c, 1)[0], 6.0f);
  for (void* p : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(c)})
    cs::cudaFree(p);
}

TEST(CublasStandIn, ValidatesLikeCublas) {
  Blas blas;
  float* a = upload(std::vector<float>(64, 1.0f));
  const float one = 1.0f;
  auto gemm = [&](cublasHandle_t h, int m, int lda, cudaDataType at, cudaDataType ct) {
    return cs::cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, 2, 2, &one, a, at, lda, a, at, 4, &one,
                            a, ct, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  EXPECT_EQ(gemm(blas.h, 4, 4, CUDA_R_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(gemm(blas.h, 4, 3, CUDA_R_32F, CUDA_R_32F), CUBLAS_STATUS_INVALID_VALUE)
      << "lda < m with op N";
  EXPECT_EQ(gemm(blas.h, -1, 4, CUDA_R_32F, CUDA_R_32F), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(gemm(blas.h, 4, 4, CUDA_R_16F, CUDA_R_16F), CUBLAS_STATUS_NOT_SUPPORTED)
      << "16-bit output is not a combination kvscope uses";
  EXPECT_EQ(gemm(nullptr, 4, 4, CUDA_R_32F, CUDA_R_32F), CUBLAS_STATUS_NOT_INITIALIZED);
  // An operand whose extent (from its leading dimension) runs past its allocation: on a GPU an
  // illegal address reported later; here at once, naming the operand.
  try {
    cs::cublasGemmEx(blas.h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 9, &one, a, CUDA_R_32F, 8, a,
                     CUDA_R_32F, 9, &one, a, CUDA_R_32F, 8, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT);
    ADD_FAILURE() << "read 72 floats from a 64-float allocation";
  } catch (const sim::SimError& e) {
    EXPECT_NE(std::string(e.what()).find("operand A (288 bytes"), std::string::npos) << e.what();
  }
  cs::cudaFree(a);
  cublasHandle_t gone = nullptr;
  ASSERT_EQ(cs::cublasCreate_v2(&gone), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cs::cublasDestroy_v2(gone), CUBLAS_STATUS_SUCCESS);
  EXPECT_STREQ(cs::cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE),
               "an invalid numeric value was used as an argument");
}

// The backend's mapping of row-major out[m][d] = x[m][n] W[d][n]^T onto column-major cuBLAS,
// through DeviceOps::gemm on the emulated device, against the CPU's matmul.
TEST(CublasStandIn, TheBackendsRowMajorMappingEqualsTheCpuMatmul) {
  auto ops = device::make_emulated_device_ops();
  const int m = 3, n = 64, d = 5;
  const std::vector<float> x = randn(m * n, 4), w = randn(d * n, 5);
  auto* dx = static_cast<float*>(ops->alloc(x.size() * 4));
  auto* dw = static_cast<float*>(ops->alloc(w.size() * 4));
  auto* dy = static_cast<float*>(ops->alloc(m * d * 4));
  ops->to_device(dx, x.data(), x.size() * 4);
  ops->to_device(dw, w.data(), w.size() * 4);
  ops->gemm(dy, dx, dw, device::GemmType::kF32, m, n, d, /*accumulate=*/false);
  std::vector<float> got(m * d), want(m * d);
  ops->to_host(got.data(), dy, got.size() * 4);
  for (int t = 0; t < m; ++t) cpu::matmul(want.data() + t * d, x.data() + t * n, w.data(), n, d);
  for (int i = 0; i < m * d; ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << i;
  // accumulate: cuBLAS's beta = 1 adds the product to what out holds (the residual add of the
  // device step), exactly as the host adds it.
  const std::vector<float> product = got;
  ops->gemm(dy, dx, dw, device::GemmType::kF32, m, n, d, /*accumulate=*/true);
  ops->to_host(got.data(), dy, got.size() * 4);
  for (int i = 0; i < m * d; ++i) EXPECT_EQ(got[i], product[i] + product[i]) << i;
  // Every copy between host and device is counted: 2 uploads, 2 downloads so far.
  const device::Traffic t = ops->traffic();
  EXPECT_EQ(t.to_device_copies, 2u);
  EXPECT_EQ(t.to_device_bytes, (x.size() + w.size()) * 4);
  EXPECT_EQ(t.to_host_copies, 2u);
  EXPECT_EQ(t.to_host_bytes, 2u * m * d * 4);
  for (void* p : {static_cast<void*>(dx), static_cast<void*>(dw), static_cast<void*>(dy)})
    ops->release(p);
}

TEST(CudaRuntimeStandIn, DeviceMemoryCatchesWhatAGpuWouldFaultOn) {
  const cs::DeviceMemory before = cs::device_memory();
  std::vector<float> host(16, 1.0f);
  void* dev = nullptr;
  ASSERT_EQ(cs::cudaMalloc(&dev, 64), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(dev) % 256, 0u);
  EXPECT_EQ(cs::device_memory().bytes_in_use - before.bytes_in_use, 64u);
  EXPECT_EQ(cs::cudaMemcpy(dev, host.data(), 64, cudaMemcpyHostToDevice), cudaSuccess);
  // The kind names the wrong side: a host pointer as the device's, or the reverse.
  EXPECT_EQ(cs::cudaMemcpy(host.data(), dev, 64, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cs::cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cs::cudaGetLastError(), cudaSuccess) << "reading the error resets it";
  EXPECT_EQ(cs::cudaMemcpy(dev, host.data(), 64, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  // Past the end of the allocation.
  EXPECT_EQ(cs::cudaMemcpy(static_cast<char*>(dev) + 4, host.data(), 64, cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  EXPECT_EQ(cs::cudaMemset(dev, 0, 65), cudaErrorInvalidValue);
  EXPECT_EQ(cs::cudaMemset(dev, 0, 64), cudaSuccess);
  // cudaMemcpyDefault infers the sides.
  std::vector<float> back(16, 7.0f);
  EXPECT_EQ(cs::cudaMemcpy(back.data(), dev, 64, cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(back[3], 0.0f);
  // Freeing what is not an allocation's start, twice, or never allocated.
  EXPECT_EQ(cs::cudaFree(static_cast<char*>(dev) + 4), cudaErrorInvalidValue);
  EXPECT_EQ(cs::cudaFree(dev), cudaSuccess);
  EXPECT_EQ(cs::cudaFree(dev), cudaErrorInvalidValue);
  EXPECT_EQ(cs::cudaFree(host.data()), cudaErrorInvalidValue);
  EXPECT_EQ(cs::cudaFree(nullptr), cudaSuccess);
  EXPECT_EQ(cs::device_memory().bytes_in_use, before.bytes_in_use);
  // Out of memory on the emulated device.
  const std::size_t old = cs::set_device_capacity(before.bytes_in_use + 1024);
  EXPECT_EQ(cs::cudaMalloc(&dev, 2048), cudaErrorMemoryAllocation);
  EXPECT_EQ(dev, nullptr);
  EXPECT_STREQ(cs::cudaGetErrorString(cs::cudaGetLastError()), "out of memory");
  cs::set_device_capacity(old);
  int count = 0;
  EXPECT_EQ(cs::cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(cs::cudaGetLastError(), cudaSuccess);
}

TEST(CudaRuntimeStandIn, DeviceOpsReportsAFailedCallInTheRuntimesWords) {
  auto ops = device::make_emulated_device_ops();
  const std::size_t old = cs::set_device_capacity(cs::device_memory().bytes_in_use);
  try {
    ops->alloc(1000);
    ADD_FAILURE() << "allocated past the capacity";
  } catch (const device::DeviceError& e) {
    EXPECT_STREQ(e.what(), "cudaMalloc of 1000 bytes: out of memory");
  }
  cs::set_device_capacity(old);
  float host[4] = {};
  try {
    ops->to_host(host, host, sizeof host);
    ADD_FAILURE() << "copied from a host pointer as if it were the device's";
  } catch (const device::DeviceError& e) {
    EXPECT_STREQ(e.what(), "cudaMemcpy device to host: invalid argument");
  }
}

// The conversion kernel, on the emulator, equals the CPU's encoders on every finite value in
// fp16's range (ties included); beyond it CUDA's rounding gives infinity.
TEST(KernelParity, To16BitEqualsTheCpuEncoders) {
  std::vector<float> x = randn(5000, 9);
  for (float& v : x) v *= 300.0f;
  x.push_back(1.0f + 1.0f / 2048.0f);   // a tie: rounds to even (1.0)
  x.push_back(3.0f / 4096.0f * 0.25f);  // fp16 subnormal
  x.push_back(-0.0f);
  x.push_back(65504.0f);
  for (bool bf16 : {false, true}) {
    std::vector<std::uint16_t> got(x.size());
    kernels::launch_to_16bit(got.data(), x.data(), static_cast<long>(x.size()), bf16);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::uint16_t want = bf16 ? quant::f32_to_bf16(x[i]) : quant::f32_to_f16(x[i]);
      ASSERT_EQ(got[i], want) << (bf16 ? "bf16 " : "f16 ") << x[i];
    }
  }
  std::uint16_t inf = 0;
  const float big = 70000.0f;
  kernels::launch_to_16bit(&inf, &big, 1, false);
  EXPECT_EQ(inf, 0x7C00u) << "__float2half_rn overflows to infinity";
}

// DeviceOps::paged_attention on the emulated device: a context past the one-pass kernel's
// limit goes split-K with a workspace DeviceOps allocates itself, and equals the CPU.
TEST(CudaRuntimeStandIn, DeviceOpsRunsLongContextsSplitK) {
  const int heads = 4, kv_heads = 2, head_dim = 32, kv_dim = kv_heads * head_dim, tokens = 9000;
  const KvFormat f = parse_kv_format("bf16", "test");
  test::QuantCache cache(f, f, 16, tokens, kv_heads, head_dim);
  const std::vector<float> k = randn(static_cast<std::size_t>(tokens) * kv_dim, 51);
  const std::vector<float> v = randn(k.size(), 52);
  for (int t = 0; t < tokens; ++t)
    cache.append(&k[static_cast<std::size_t>(t) * kv_dim],
                 &v[static_cast<std::size_t>(t) * kv_dim]);
  const std::vector<float> q = randn(static_cast<std::size_t>(heads) * head_dim, 53);
  const KvSeqView view = cache.view();
  std::vector<float> want(q.size()), got(q.size()), scratch;
  cpu::paged_attention(view, 0, {heads, kv_heads, head_dim}, q.data(), want.data(), tokens - 1,
                       nullptr, scratch);
  auto ops = device::make_emulated_device_ops();
  const KvStorage& st = cache.storage();
  const std::size_t region = st.layout().tile_bytes(KvKind::kKey) * st.layout().num_blocks;
  void* dk = ops->alloc(region);
  void* dv = ops->alloc(region);
  ops->to_device(dk, st.tile(0, KvKind::kKey, BlockId(0)), region);
  ops->to_device(dv, st.tile(0, KvKind::kValue, BlockId(0)), region);
  std::vector<int> table;
  for (BlockId b : view.blocks) table.push_back(static_cast<int>(b.value));
  auto* dt = static_cast<int*>(ops->alloc(table.size() * sizeof(int)));
  ops->to_device(dt, table.data(), table.size() * sizeof(int));
  auto* dq = static_cast<float*>(ops->alloc(q.size() * 4));
  auto* dout = static_cast<float*>(ops->alloc(q.size() * 4));
  ops->to_device(dq, q.data(), q.size() * 4);
  device::PagedPool p;
  const auto tile = static_cast<long>(st.layout().tile_bytes(KvKind::kKey));
  p.k = {static_cast<unsigned char*>(dk), tile, device::KvCode::kBF16};
  p.v = {static_cast<unsigned char*>(dv), tile, device::KvCode::kBF16};
  p.block_table = dt;
  p.num_slots = tokens;
  p.block_size = 16;
  p.kv_heads = kv_heads;
  p.head_dim = head_dim;
  ops->paged_attention(dout, dq, p, heads, nullptr);
  ops->to_host(got.data(), dout, got.size() * 4);
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 2e-6 + 1e-4 * std::fabs(want[i])) << i;
  for (void* ptr :
       {dk, dv, static_cast<void*>(dt), static_cast<void*>(dq), static_cast<void*>(dout)})
    ops->release(ptr);
}

}  // namespace
}  // namespace kvscope

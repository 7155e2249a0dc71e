// The CUDA the kernels use, spelled once for two compilers: with nvcc (__CUDACC__) these are the
// CUDA built-ins; with g++ they call the project's SIMT emulator (kernels/sim/simt.h), so every
// kernel body in kernels/*.cuh compiles and runs on a machine without a GPU. Kernels use only
// what this header offers: thread coordinates, barriers, warp shuffles and votes, shared memory
// and the launch macro.
#pragma once

#include <math.h>
#include <string.h>

#include <cstddef>
#include <cstdint>

// Kernels and their launch wrappers live in kvscope::kernels, inside an inline namespace that
// differs between the two compilers: a binary that links both the nvcc build (the CUDA backend)
// and the g++ build (the emulator) then holds two sets of launch wrappers under different names,
// never one inline function with two definitions.
#ifdef __CUDACC__
#define KVS_KERNELS_BEGIN      \
  namespace kvscope::kernels { \
  inline namespace gpu {
#else
#define KVS_KERNELS_BEGIN      \
  namespace kvscope::kernels { \
  inline namespace emulated {
#endif
#define KVS_KERNELS_END \
  }                     \
  }

#ifdef __CUDACC__

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#define KVS_GLOBAL __global__
#define KVS_DEVICE __device__ __forceinline__
#define KVS_HOST_DEVICE __host__ __device__ __forceinline__
// A static shared array: one per block, every thread of the block sees the same one.
#define KVS_SHARED_ARRAY(T, name, n) __shared__ T name[n]
// The launch's dynamic shared memory as a T*.
#define KVS_DYNAMIC_SHARED(T, name)                                  \
  extern __shared__ __align__(16) unsigned char kvs_dynamic_smem_[]; \
  T* name = reinterpret_cast<T*>(kvs_dynamic_smem_)
#define KVS_LAUNCH(kernel, grid, block, smem, ...) kernel<<<(grid), (block), (smem)>>>(__VA_ARGS__)
// Unrolls the loop that follows, so that a small array it indexes stays in registers.
#define KVS_UNROLL _Pragma("unroll")

namespace kvscope::simt {
using Dim3 = ::dim3;
KVS_DEVICE unsigned tid_x() {
  return threadIdx.x;
}
KVS_DEVICE unsigned tid_y() {
  return threadIdx.y;
}
KVS_DEVICE unsigned bid_x() {
  return blockIdx.x;
}
KVS_DEVICE unsigned bid_y() {
  return blockIdx.y;
}
KVS_DEVICE unsigned bdim_x() {
  return blockDim.x;
}
KVS_DEVICE unsigned bdim_y() {
  return blockDim.y;
}
KVS_DEVICE unsigned gdim_x() {
  return gridDim.x;
}
KVS_DEVICE unsigned gdim_y() {
  return gridDim.y;
}
KVS_DEVICE unsigned lane() {
  return threadIdx.x % 32u;
}
KVS_DEVICE void sync_block() {
  __syncthreads();
}
KVS_DEVICE void sync_warp(unsigned mask = 0xFFFFFFFFu) {
  __syncwarp(mask);
}
template <class T>
KVS_DEVICE T shfl_xor(T v, int lane_mask, unsigned mask = 0xFFFFFFFFu) {
  return __shfl_xor_sync(mask, v, lane_mask);
}
template <class T>
KVS_DEVICE T shfl(T v, int src_lane, unsigned mask = 0xFFFFFFFFu) {
  return __shfl_sync(mask, v, src_lane);
}
KVS_DEVICE unsigned ballot(bool pred, unsigned mask = 0xFFFFFFFFu) {
  return __ballot_sync(mask, pred);
}
KVS_DEVICE float fast_exp(float x) {
  return __expf(x);
}
// sin and cos of x in [-pi, pi] (the hardware's approximations: ~4e-7 absolute error there).
KVS_DEVICE void sincos_small(float x, float* s, float* c) {
  __sincosf(x, s, c);
}
KVS_DEVICE float rsqrt(float x) {
  return rsqrtf(x);
}
// The bits of x as IEEE binary16 / bfloat16, rounded to nearest even (cuBLAS's 16-bit inputs).
KVS_DEVICE std::uint16_t f16_bits(float x) {
  return __half_as_ushort(__float2half_rn(x));
}
KVS_DEVICE std::uint16_t bf16_bits(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
// The memory trace (kernels/sim/memory_trace.h) records nothing on a GPU.
KVS_DEVICE void trace_load(const void*, unsigned, unsigned, int, std::uint64_t) {}
KVS_DEVICE void trace_role(int, int, int, int, int, int, int, const int*, int, int) {}
KVS_DEVICE void trace_write_role(int, int, int, const int*, int) {}
KVS_DEVICE void trace_store(const void*, unsigned, unsigned, int, std::uint64_t) {}
}  // namespace kvscope::simt

#else  // g++: the SIMT emulator

#include <cmath>

#include "kernels/sim/memory_trace.h"
#include "kernels/sim/simt.h"

#define KVS_GLOBAL inline
#define KVS_DEVICE inline
#define KVS_HOST_DEVICE inline
#define KVS_SHARED_ARRAY(T, name, n) \
  T* name = static_cast<T*>(::kvscope::sim::shared_alloc(sizeof(T) * (n), alignof(T)))
#define KVS_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::kvscope::sim::dynamic_shared())
#define KVS_UNROLL
#define KVS_LAUNCH(kernel, grid, block, smem, ...)                                       \
  ::kvscope::sim::launch(::kvscope::sim::LaunchConfig{(grid), (block), (smem), #kernel}, \
                         [&] { kernel(__VA_ARGS__); })

namespace kvscope::simt {
using Dim3 = ::kvscope::sim::dim3;
inline unsigned tid_x() {
  return sim::thread_idx().x;
}
inline unsigned tid_y() {
  return sim::thread_idx().y;
}
inline unsigned bid_x() {
  return sim::block_idx().x;
}
inline unsigned bid_y() {
  return sim::block_idx().y;
}
inline unsigned bdim_x() {
  return sim::block_dim().x;
}
inline unsigned bdim_y() {
  return sim::block_dim().y;
}
inline unsigned gdim_x() {
  return sim::grid_dim().x;
}
inline unsigned gdim_y() {
  return sim::grid_dim().y;
}
inline unsigned lane() {
  return sim::lane_id();
}
inline void sync_block() {
  sim::sync_block();
}
inline void sync_warp(unsigned mask = sim::kFullMask) {
  sim::sync_warp(mask);
}
template <class T>
T shfl_xor(T v, int lane_mask, unsigned mask = sim::kFullMask) {
  return sim::shfl(mask, v, static_cast<int>(sim::lane_id()) ^ lane_mask);
}
template <class T>
T shfl(T v, int src_lane, unsigned mask = sim::kFullMask) {
  return sim::shfl(mask, v, src_lane);
}
inline unsigned ballot(bool pred, unsigned mask = sim::kFullMask) {
  return sim::ballot(mask, pred);
}
inline float fast_exp(float x) {
  return std::exp(x);
}
inline void sincos_small(float x, float* s, float* c) {
  *s = std::sin(x);
  *c = std::cos(x);
}
inline float rsqrt(float x) {
  return 1.0f / std::sqrt(x);
}
// As the CUDA intrinsics: round to nearest even; overflow goes to infinity (binary16) as
// __float2half_rn does; NaN stays NaN.
inline std::uint16_t f16_bits(float x) {
  std::uint32_t u = 0;
  std::memcpy(&u, &x, 4);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t mag = u & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u);   // NaN
  if (mag >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // rounds past 65504
  if (mag < 0x38800000u) {  // subnormal or zero in binary16: scale by 2^24 and round
    const float a = std::fabs(x) * 16777216.0f;
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(std::nearbyint(a)));
  }
  const std::uint32_t rounded = mag + 0x0FFFu + ((mag >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}
inline std::uint16_t bf16_bits(float x) {
  std::uint32_t u = 0;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
// The memory trace (kernels/sim/memory_trace.h): a load of `bytes` bytes at p, what it is
// (sim::TraceWhat), the physical KV block it belongs to (-1: none) and its instruction's key
// (trace_key); and what this thread block works on. Both do nothing unless a recorder records.
inline void trace_load(const void* p, unsigned bytes, unsigned what, int tile, std::uint64_t key) {
  if (sim::recording()) sim::trace_access(p, bytes, what, tile, key);
}
inline void trace_role(int query, int kv_head, int split, int head_first, int heads, int slot_begin,
                       int slot_end, const int* table, int num_slots, int block_size) {
  if (sim::recording())
    sim::trace_role(query, kv_head, split, head_first, heads, slot_begin, slot_end, table,
                    num_slots, block_size);
}
// A store, recorded as a load is (a write kernel's traffic is its stores).
inline void trace_store(const void* p, unsigned bytes, unsigned what, int tile, std::uint64_t key) {
  if (sim::recording()) sim::trace_access(p, bytes, what, tile, key);
}
// A KV write's thread block: row (0 K, 1 V) of `slot`, KV head kv_head (-1: the whole row).
inline void trace_write_role(int row, int kv_head, int slot, const int* table, int block_size) {
  if (sim::recording()) sim::trace_write_role(row, kv_head, slot, table, block_size);
}
}  // namespace kvscope::simt

#endif

namespace kvscope::simt {
// The key of one dynamic load instruction within a thread block (memory_trace.h): the load site,
// and the loop counters that tell its executions apart (a < 2^40, b < 2^16). Lanes of a warp
// whose loads have the same key and TraceWhat issued them together.
KVS_HOST_DEVICE std::uint64_t trace_key(unsigned site, long a, long b) {
  return (static_cast<std::uint64_t>(site) << 56) |
         ((static_cast<std::uint64_t>(a) & 0xFFFFFFFFFFull) << 16) |
         (static_cast<std::uint64_t>(b) & 0xFFFFull);
}
// TraceWhat's values the kernels name (the same as kernels/sim/memory_trace.h's).
constexpr unsigned kTraceKCodes = 0, kTraceKScales = 1, kTraceVCodes = 2, kTraceVScales = 3,
                   kTraceTable = 4, kTraceStaging = 5;
}  // namespace kvscope::simt
#ifndef __CUDACC__
static_assert(kvscope::simt::kTraceKCodes == kvscope::sim::kTraceKCodes &&
              kvscope::simt::kTraceVScales == kvscope::sim::kTraceVScales &&
              kvscope::simt::kTraceStaging == kvscope::sim::kTraceStaging);
#endif

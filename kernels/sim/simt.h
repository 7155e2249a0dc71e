// A SIMT emulator: CUDA's execution model run on the CPU, so that kernel bodies written once
// (kernels/*.cuh, through kernels/common/simt_api.cuh) compile with nvcc for the GPU and with g++
// here, and execute here. No machine this project is built on has a GPU: this is how its CUDA
// kernels run at all.
//
// What it models: a grid of blocks of threads (dim3, up to 1024 threads per block), run block by
// block; within a block one fiber per CUDA thread (ucontext), switched at every barrier and warp
// collective, so threads interleave as they may on a GPU; warps of 32 lanes with shuffles, votes
// and __syncwarp that wait for every lane of their mask; static and dynamic shared memory, each
// allocation its own heap block (AddressSanitizer sees an out-of-bounds shared access) and
// poisoned (0xFF bytes: NaN as floats) before each block; atomics.
//
// What it reports as a kernel bug (SimError): a barrier some threads of the block never reach
// (they exited, or wait at another barrier), a warp collective whose mask names a lane that
// exited or never arrives, a mask that leaves out the calling lane, shuffles from a lane outside
// the mask, launch limits (threads per block, grid and block dimensions, shared memory).
//
// What it does not model: timing, memory coalescing and bank conflicts, warp-synchronous code
// without __syncwarp (lanes do not run in lockstep here, by design: such code is a bug on
// Volta and later too), and, in fiber mode, data races between threads of one block that a
// missing __syncthreads would allow on a GPU (fibers run one at a time): thread mode under
// ThreadSanitizer is the tool for those.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace kvscope::sim {

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xFFFFFFFFu;
// The limits every GPU kvscope targets (sm_80, sm_90) enforces at launch.
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr std::size_t kMaxSharedBytes = 48 * 1024;  // static + dynamic, without opting in

// A bug in a kernel or its launch, found by the emulator; what() names the kernel's block and
// thread where it applies.
class SimError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

struct LaunchConfig {
  dim3 grid;
  dim3 block;
  std::size_t shared_bytes = 0;  // dynamic shared memory
  const char* kernel = "kernel";
};

// How a block's CUDA threads run. kFibers (the default): one fiber each, switched at barriers and
// collectives on the calling OS thread (fast; AddressSanitizer-clean). kThreads: one OS thread
// each, synchronized by a mutex and condition variable at every barrier and collective, so
// ThreadSanitizer sees the kernel's real concurrency: a shared-memory access that a missing
// __syncthreads leaves unordered is a data race it reports. The initial mode is kThreads when the
// environment has KVSCOPE_SIM_MODE=threads, else kFibers.
enum class Mode { kFibers, kThreads };
void set_mode(Mode mode);
Mode mode();

// Runs `body` once per CUDA thread of the grid, block by block. Throws SimError for a kernel
// bug, and rethrows any exception a thread threw.
void launch(const LaunchConfig& config, const std::function<void()>& body);

// Inside a kernel: the calling thread's coordinates.
const dim3& thread_idx();
const dim3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();

// __syncthreads(): waits until every thread of the block arrives.
void sync_block();
// __syncwarp(mask): waits until every lane of `mask` arrives.
void sync_warp(unsigned mask);
// The lane of the calling thread (0..31) and its warp's lanes that exist (a partial last warp).
unsigned lane_id();

// Warp exchange of up to 8 bytes: every lane of `mask` deposits `bits`; returns lane `src`'s.
std::uint64_t exchange(unsigned mask, std::uint64_t bits, int src);
// __ballot_sync(mask, pred): bit i set when lane i of the mask passed a non-zero predicate.
unsigned ballot(unsigned mask, bool pred);

// Shared memory: the calling thread's n-th static allocation of the block (KVS_SHARED_ARRAY),
// the same memory for every thread of the block; and the dynamic shared memory of the launch.
void* shared_alloc(std::size_t bytes, std::size_t align);
void* dynamic_shared();

template <class T>
T shfl(unsigned mask, T value, int src_lane) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffles move up to 8 bytes");
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = exchange(mask, bits, src_lane);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

}  // namespace kvscope::sim

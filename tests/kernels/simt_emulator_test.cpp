// The SIMT emulator itself: what CUDA guarantees (barriers order shared-memory writes before
// reads, shuffles and reductions see every lane, blocks get fresh poisoned shared memory) holds,
// and the kernel bugs it promises to catch are caught, each with a message naming the place.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/common/reduce.cuh"

namespace kvscope::kernels {
namespace {

using sim::SimError;

// Every thread writes its index to shared memory, syncs, and reads its neighbour's.
KVS_GLOBAL void rotate_kernel(int* out) {
  KVS_SHARED_ARRAY(int, buf, 1024);
  const unsigned t = simt::tid_x(), n = simt::bdim_x();
  buf[t] = static_cast<int>(t) + 1000 * static_cast<int>(simt::bid_x());
  simt::sync_block();
  out[simt::bid_x() * n + t] = buf[(t + 1) % n];
}

TEST(SimtEmulator, BarrierOrdersSharedWritesBeforeReads) {
  for (unsigned threads : {1u, 31u, 32u, 96u, 1024u}) {
    std::vector<int> out(3 * threads, -1);
    int* p = out.data();
    KVS_LAUNCH(rotate_kernel, sim::dim3(3), sim::dim3(threads), 0, p);
    for (unsigned b = 0; b < 3; ++b)
      for (unsigned t = 0; t < threads; ++t)
        ASSERT_EQ(out[b * threads + t], static_cast<int>((t + 1) % threads + 1000 * b))
            << threads << " threads, block " << b << " thread " << t;
  }
}

KVS_GLOBAL void sum_kernel(float* out, const float* x, int n) {
  KVS_SHARED_ARRAY(float, slots, 32);
  float s = 0.0f;
  for (int i = static_cast<int>(simt::tid_x()); i < n; i += static_cast<int>(simt::bdim_x()))
    s += x[i];
  const float total = block_sum(s, slots);
  const float biggest = block_max(s, slots);  // the slots are reused after the first reduction
  if (simt::tid_x() == simt::bdim_x() - 1) {
    out[0] = total;
    out[1] = biggest;
  }
}

TEST(SimtEmulator, BlockReductionsSeeEveryWarp) {
  std::vector<float> x(1000);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7);
  for (unsigned threads : {32u, 64u, 256u, 1024u}) {
    float out[2] = {0, 0};
    float* o = out;
    const float* xp = x.data();
    KVS_LAUNCH(sum_kernel, sim::dim3(1), sim::dim3(threads), 0, o, xp, 1000);
    EXPECT_EQ(out[0], 2997.0f) << threads;  // sum of i % 7 over 0..999: 142 * 21 + 15
    float want_max = 0.0f;                  // the largest per-thread partial sum
    for (unsigned t = 0; t < threads; ++t) {
      float s = 0.0f;
      for (unsigned i = t; i < 1000; i += threads) s += x[i];
      want_max = std::max(want_max, s);
    }
    EXPECT_EQ(out[1], want_max) << threads;
  }
}

KVS_GLOBAL void read_dynamic_kernel(float* out) {
  KVS_DYNAMIC_SHARED(float, smem);
  if (simt::tid_x() == 0) {
    out[simt::bid_x()] = smem[0];
    smem[0] = 1.0f;  // the next block must not see this
  }
}

TEST(SimtEmulator, SharedMemoryIsPoisonedBeforeEveryBlock) {
  float out[2] = {0, 0};
  float* o = out;
  KVS_LAUNCH(read_dynamic_kernel, sim::dim3(2), sim::dim3(32), 64, o);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(out[1]));
}

KVS_GLOBAL void divergent_barrier_kernel() {
  if (simt::tid_x() < 16u) return;
  simt::sync_block();
}

KVS_GLOBAL void exited_lane_kernel(float* out) {
  if (simt::tid_x() == 5u) return;
  out[simt::tid_x()] = simt::shfl_xor(1.0f, 1);
}

KVS_GLOBAL void shared_overflow_kernel() {
  KVS_SHARED_ARRAY(float, buf, 32);
  buf[simt::tid_x()] = 1.0f;  // 40 threads, 32 floats: 32 bytes past the end, within the guard
}

KVS_GLOBAL void nothing_kernel() {}

template <class Fn>
std::string sim_error(Fn&& fn) {
  try {
    fn();
  } catch (const SimError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(SimtEmulator, CatchesABarrierInDivergentCode) {
  const std::string e =
      sim_error([] { KVS_LAUNCH(divergent_barrier_kernel, sim::dim3(1), sim::dim3(64), 0); });
  EXPECT_NE(e.find("divergent_barrier_kernel block (0,0,0) thread ("), std::string::npos) << e;
  EXPECT_NE(e.find("exited while 48 threads of its block wait at __syncthreads"), std::string::npos)
      << e;
}

TEST(SimtEmulator, CatchesAShuffleWithAnExitedLane) {
  std::vector<float> out(32);
  float* o = out.data();
  const std::string e =
      sim_error([&] { KVS_LAUNCH(exited_lane_kernel, sim::dim3(1), sim::dim3(32), 0, o); });
  EXPECT_NE(e.find("names lane 5, which has exited"), std::string::npos) << e;
}

TEST(SimtEmulator, CatchesAnOutOfBoundsSharedWrite) {
  const std::string e =
      sim_error([] { KVS_LAUNCH(shared_overflow_kernel, sim::dim3(1), sim::dim3(40), 0); });
  EXPECT_NE(e.find("shared_overflow_kernel block (0,0,0): shared allocation 0 (128 bytes) was "
                   "written past its end"),
            std::string::npos)
      << e;
}

TEST(SimtEmulator, CatchesLaunchLimits) {
  EXPECT_NE(sim_error([] {
              KVS_LAUNCH(nothing_kernel, sim::dim3(1), sim::dim3(2048), 0);
            }).find("exceeds 1024 threads per block"),
            std::string::npos);
  EXPECT_NE(sim_error([] {
              KVS_LAUNCH(nothing_kernel, sim::dim3(1), sim::dim3(32), 64 * 1024);
            }).find("exceed the 48 KiB"),
            std::string::npos);
  EXPECT_NE(sim_error([] {
              KVS_LAUNCH(nothing_kernel, sim::dim3(0), sim::dim3(32), 0);
            }).find("empty grid"),
            std::string::npos);
}

}  // namespace
}  // namespace kvscope::kernels

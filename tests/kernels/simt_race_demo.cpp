// A kernel with a missing __syncthreads, run in the emulator's thread mode: built only in the
// ThreadSanitizer build, where CTest expects TSan's "data race" report from it (so the TSan suite
// is shown to catch the bug it is there for). Every thread writes its slot of shared memory and
// reads its neighbour's with no barrier between. So that the race happens in every run, not only
// when the OS happens to interleave the threads, each thread waits (a relaxed counter: no
// happens-before, as no barrier) until all have written before it reads: on a GPU that read is
// exactly as unordered.
#include <sched.h>

#include <atomic>
#include <cstdio>

#include "kernels/common/simt_api.cuh"

namespace {

std::atomic<unsigned> g_written{0};

KVS_GLOBAL void missing_barrier_kernel(int* out) {
  KVS_SHARED_ARRAY(int, buf, 64);
  const unsigned t = kvscope::simt::tid_x();
  buf[t] = static_cast<int>(t);
  // kvscope::simt::sync_block();  <- missing
  g_written.fetch_add(1, std::memory_order_relaxed);
  while (g_written.load(std::memory_order_relaxed) < 64) sched_yield();
  out[t] = buf[(t + 1) % 64];
}

}  // namespace

int main() {
  kvscope::sim::set_mode(kvscope::sim::Mode::kThreads);
  int out[64] = {};
  int* p = out;
  KVS_LAUNCH(missing_barrier_kernel, kvscope::sim::dim3(1), kvscope::sim::dim3(64), 0, p);
  std::printf("ran missing_barrier_kernel in thread mode\n");
  return 0;
}

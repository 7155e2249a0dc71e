// CpuBackend's thread count holds on whichever thread runs it: OpenMP keeps the count per calling
// thread, and the UI builds the backend on one thread and steps the Simulator on another.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/common/openmp.h"

namespace kvscope {
namespace {

// Runs one matmul on a fresh thread whose own OpenMP count starts at `worker_default`, and returns
// that thread's count afterwards (what the op's parallel regions used).
int threads_seen_by_a_worker(Backend& backend, int worker_default) {
  int seen = -1;
  std::thread worker([&] {
    omp_set_num_threads(worker_default);
    std::vector<float> w(64 * 64, 1.0f), x(64, 1.0f), out(64);
    backend.matmul(out.data(), x.data(), w.data(), 64, 64);
    EXPECT_EQ(out[0], 64.0f);
    seen = omp_get_max_threads();
  });
  worker.join();
  return seen;
}

TEST(CpuBackendThreads, TheCountAppliesOnTheThreadThatRunsTheOps) {
  omp_set_num_threads(3);  // the building thread's own count must not leak into the backend's
  auto one = make_cpu_backend(1);
  EXPECT_EQ(threads_seen_by_a_worker(*one, 4), 1);
  auto two = make_cpu_backend(2);
  EXPECT_EQ(threads_seen_by_a_worker(*two, 1), 2);
}

TEST(CpuBackendThreads, ZeroMeansEveryCoreWhateverTheCallerSetBefore) {
  auto all = make_cpu_backend(0);
  EXPECT_EQ(threads_seen_by_a_worker(*all, 1), omp_get_num_procs());
}

}  // namespace
}  // namespace kvscope

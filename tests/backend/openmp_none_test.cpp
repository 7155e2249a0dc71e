// engine/common/openmp.h without OpenMP, as the browser build compiles the engine: this file is
// built with -fno-openmp (tests/CMakeLists.txt), so it sees the fallback the page's engine runs
// on. The engine's own results without OpenMP are tested in the browser build itself
// (tests/web/: the golden output and the kernels' parity under Node.js).
#include <gtest/gtest.h>

#include <vector>

#include "engine/common/openmp.h"

#if defined(_OPENMP)
#error "openmp_none_test.cpp must be compiled without OpenMP (-fno-openmp)"
#endif

namespace {

TEST(OpenMpNone, AnswersAsOneThreadOutsideAParallelRegion) {
  EXPECT_EQ(omp_get_max_threads(), 1);
  EXPECT_EQ(omp_get_num_threads(), 1);
  EXPECT_EQ(omp_get_thread_num(), 0);
  EXPECT_EQ(omp_get_num_procs(), 1);
  omp_set_num_threads(8);  // a request the fallback cannot honour changes nothing
  EXPECT_EQ(omp_get_max_threads(), 1);
}

// The engine's loops keep their pragmas; without OpenMP each runs in order on the calling thread,
// and code that sizes per-thread scratch by omp_get_max_threads() gets one slot.
TEST(OpenMpNone, APragmaLoopRunsInOrderOnTheCallingThread) {
  constexpr int kN = 1000;
  std::vector<int> order;
  std::vector<int> scratch(static_cast<std::size_t>(omp_get_max_threads()), 0);
  long sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
  for (int i = 0; i < kN; ++i) {
    order.push_back(i);  // a data race under OpenMP; in order here
    scratch[static_cast<std::size_t>(omp_get_thread_num())] += 1;
    sum += i;
  }
  ASSERT_EQ(order.size(), static_cast<std::size_t>(kN));
  for (int i = 0; i < kN; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(scratch, std::vector<int>{kN});
  EXPECT_EQ(sum, static_cast<long>(kN) * (kN - 1) / 2);
}

}  // namespace

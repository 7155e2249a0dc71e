// OpenMP, or one thread where the build has none. A build with -fopenmp (every desktop build)
// defines _OPENMP and gets <omp.h>. The browser build has no OpenMP runtime for WebAssembly: its
// `#pragma omp` lines are ignored, every loop runs on the calling thread, and these functions
// answer as OpenMP does outside a parallel region with one thread (docs/web.md). Include this,
// never <omp.h>, in the engine. tests/backend/openmp_none_test.cpp compiles the fallback in the
// desktop build.
#pragma once

#if defined(_OPENMP)
#include <omp.h>
#else
inline int omp_get_max_threads() {
  return 1;
}
inline int omp_get_num_threads() {
  return 1;
}
inline int omp_get_thread_num() {
  return 0;
}
inline int omp_get_num_procs() {
  return 1;
}
inline void omp_set_num_threads(int) {}
#endif

// Inputs for the kernel tests (engine-free, so the ThreadSanitizer binary can use it too).
#pragma once

#include <random>
#include <vector>

namespace kvscope::test {

// n normal samples of standard deviation `scale`, the same for the same seed.
inline std::vector<float> randn(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace kvscope::test

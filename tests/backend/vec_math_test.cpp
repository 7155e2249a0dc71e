// The vectorizable exp of the CPU kernels against the C library's, across the whole float range
// the softmax and SwiGLU feed it, plus the edge cases the attention mask relies on.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "engine/backend/cpu/vec_math.h"

namespace kvscope::cpu {
namespace {

TEST(VecExp, WithinAFewUlpOfTheCLibrary) {
  double worst = 0.0;
  float worst_x = 0.0f;
  for (float x = kExpMin; x <= kExpMax; x += 1.0e-3f) {
    const double ref = std::exp(static_cast<double>(x));
    const double rel = std::fabs(vexp(x) - ref) / ref;
    if (rel > worst) {
      worst = rel;
      worst_x = x;
    }
  }
  // float's ulp is 2^-23 = 1.19e-7 relative at most; allow 3 ulp.
  EXPECT_LT(worst, 3 * 1.1920929e-7) << "at x = " << worst_x;
}

TEST(VecExp, EdgeCases) {
  EXPECT_EQ(vexp(0.0f), 1.0f);
  EXPECT_EQ(vexp(-std::numeric_limits<float>::infinity()), 0.0f);  // masked attention slot
  EXPECT_EQ(vexp(-100.0f), 0.0f);
  EXPECT_EQ(vexp(std::nanf("")), 0.0f);
  EXPECT_TRUE(std::isfinite(vexp(1000.0f)));  // clamped, never inf
  EXPECT_GT(vexp(kExpMin), 0.0f);
  EXPECT_NEAR(vexp(1.0f), 2.7182817f, 3e-7f);
}

}  // namespace
}  // namespace kvscope::cpu

// cpu::fma's rare case (fma.h), built with -ffp-contract=off and without -fassociative-math
// (engine/CMakeLists.txt): the two-sum below is computed as written.
#include "engine/backend/cpu/fma.h"

namespace kvscope::cpu {

#if defined(__wasm__)
float fma_halfway(float a, float b, float c) {
  const double p = static_cast<double>(a) * static_cast<double>(b);
  const double s = p + static_cast<double>(c);
  // A halfway s that is the exact sum (two-sum: s + err == p + c exactly, and err is 0) is
  // rounded once, correctly, by the conversion; only a rounded one needs the library.
  const double c_part = s - p;
  const double err = (p - (s - c_part)) + (static_cast<double>(c) - c_part);
  if (err == 0.0) return static_cast<float>(s);
  return std::fma(a, b, c);
}
#endif

}  // namespace kvscope::cpu

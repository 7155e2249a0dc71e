// Integer quantization primitives: int8 symmetric, b-bit asymmetric (min/max) codes.
#include "engine/quant/int_codec.h"

#include <algorithm>
#include <cmath>

#include "engine/quant/float_formats.h"

namespace kvscope::quant {
namespace {

struct Range {
  float lo = 0.0f;
  float hi = 0.0f;
};

Range range_of(const float* x, int n, int stride) {
  Range r{INFINITY, -INFINITY};
  for (int i = 0; i < n; ++i) {
    const float v = x[static_cast<std::size_t>(i) * stride];
    if (!std::isfinite(v)) continue;  // never let a stray inf/NaN poison the whole group's scale
    r.lo = std::min(r.lo, v);
    r.hi = std::max(r.hi, v);
  }
  if (r.lo > r.hi) r = {0.0f, 0.0f};
  return r;
}

// Scale and zero rounded to fp16, and the code of v under them.
struct AsymParams {
  ScaleZero stored;
  float scale = 0.0f;
  float zero = 0.0f;
  float levels = 0.0f;
  unsigned code(float v) const {
    if (!(scale > 0.0f)) return 0;
    const float c = std::nearbyint((v - zero) / scale);
    return static_cast<unsigned>(std::clamp(std::isnan(c) ? 0.0f : c, 0.0f, levels));
  }
};

AsymParams asym_params(const float* x, int n, int stride, int bits) {
  const Range r = range_of(x, n, stride);
  AsymParams p;
  p.levels = static_cast<float>((1 << bits) - 1);
  p.stored.zero = f32_to_f16(r.lo);
  p.zero = f16_to_f32(p.stored.zero);
  // Stretch the range by the zero's rounding so the maximum stays representable.
  const float span = std::max(0.0f, r.hi - p.zero);
  p.stored.scale = f32_to_f16(span / p.levels);
  p.scale = f16_to_f32(p.stored.scale);
  return p;
}

}  // namespace

std::uint16_t quantize_int8(const float* x, int n, std::int8_t* codes) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::isfinite(x[i])) amax = std::max(amax, std::fabs(x[i]));
  }
  const std::uint16_t stored = f32_to_f16(amax / 127.0f);
  const float scale = f16_to_f32(stored);
  for (int i = 0; i < n; ++i) {
    float c = scale > 0.0f ? std::nearbyint(x[i] / scale) : 0.0f;
    if (std::isnan(c)) c = 0.0f;
    codes[i] = static_cast<std::int8_t>(std::clamp(c, -127.0f, 127.0f));
  }
  return stored;
}

ScaleZero quantize_asym(const float* x, int n, int stride, int bits, std::uint8_t* row, int first) {
  const AsymParams p = asym_params(x, n, stride, bits);
  for (int i = 0; i < n; ++i)
    set_code(row, first + i, bits, p.code(x[static_cast<std::size_t>(i) * stride]));
  return p.stored;
}

ScaleZero quantize_asym_column(const float* x, int n, int stride, int bits,
                               std::uint8_t* const* rows, int column) {
  const AsymParams p = asym_params(x, n, stride, bits);
  for (int i = 0; i < n; ++i) {
    set_code(rows[i], column, bits, p.code(x[static_cast<std::size_t>(i) * stride]));
  }
  return p.stored;
}

}  // namespace kvscope::quant

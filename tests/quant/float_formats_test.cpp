// Narrow float conversions: exhaustive round trips, rounding ties, saturation, NaN handling.
#include "engine/quant/float_formats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/common/bit_cast.h"

namespace kvscope::quant {
namespace {

TEST(Fp16, EveryFiniteCodeRoundTrips) {
  for (int c = 0; c < 65536; ++c) {
    const auto h = static_cast<std::uint16_t>(c);
    const float f = f16_to_f32(h);
    if (std::isnan(f) || std::isinf(f)) continue;
    ASSERT_EQ(f32_to_f16(f), h) << "code " << c;
  }
}

TEST(Fp16, KnownValuesTiesAndSaturation) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(1e9f), 0x7BFF);  // saturates, no infinity
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xFBFF);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);             // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);             // tie -> even (0)
  EXPECT_EQ(f32_to_f16(3 * std::ldexp(1.0f, -25)), 0x0002);         // tie -> even (2)
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie -> even
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie -> even
}

TEST(Bf16, EveryFiniteCodeRoundTripsAndSaturates) {
  for (int c = 0; c < 65536; ++c) {
    const auto b = static_cast<std::uint16_t>(c);
    const float f = bf16_to_f32(b);
    if (std::isnan(f) || std::isinf(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), b) << "code " << c;
  }
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(3.4e38f), 0x7F7F);                      // rounds up past max: saturate
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7F7F);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(Fp8, E4M3MatchesTheOcpDefinition) {
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xFF)));
  EXPECT_EQ(f32_to_e4m3(1000.0f), 0x7E);  // saturate
  EXPECT_EQ(f32_to_e4m3(-1e30f), 0xFE);
  EXPECT_EQ(f32_to_e4m3(INFINITY), 0x7E);
  EXPECT_EQ(f32_to_e4m3(464.0f), 0x7E);   // halfway to the (absent) 480: still max
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);  // tie between 1.0 (even) and 1.125
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3A);  // tie between 1.125 and 1.25 (even)
  for (int c = 0; c < 256; ++c) {
    const float f = e4m3_to_f32(static_cast<std::uint8_t>(c));
    if (std::isnan(f) || c == 0x80) continue;  // -0 encodes back as -0 (0x80) too
    ASSERT_EQ(f32_to_e4m3(f), c) << "code " << c;
  }
}

TEST(Fp8, E5M2MatchesTheOcpDefinition) {
  EXPECT_EQ(e5m2_to_f32(0x7B), 57344.0f);
  EXPECT_EQ(e5m2_to_f32(0x01), std::ldexp(1.0f, -16));
  EXPECT_TRUE(std::isinf(e5m2_to_f32(0x7C)));
  EXPECT_TRUE(std::isnan(e5m2_to_f32(0x7D)));
  EXPECT_EQ(f32_to_e5m2(1e6f), 0x7B);
  EXPECT_EQ(f32_to_e5m2(-INFINITY), 0xFB);
  for (int c = 0; c < 256; ++c) {
    const float f = e5m2_to_f32(static_cast<std::uint8_t>(c));
    if (!std::isfinite(f) || c == 0x80) continue;
    ASSERT_EQ(f32_to_e5m2(f), c) << "code " << c;
  }
}

// Encoding against its definition, the nearest finite code found by scanning all of them (ties
// to the even code; saturating above the largest; the sign kept): at every code's value, at every
// midpoint between neighbours and one float either side of it, in the subnormal range and across
// it, and at random floats of every magnitude, both signs. (All 2^32 floats were checked once
// against the earlier binary-search encoder: identical.)
TEST(Fp8, EncodingIsTheNearestCodeTiesToEven) {
  const auto check = [](float (*decode)(std::uint8_t), std::uint8_t (*encode)(float), int max_code,
                        const char* what) {
    std::vector<float> values;  // positive finite codes 0..max_code, increasing
    for (int c = 0; c <= max_code; ++c) values.push_back(decode(static_cast<std::uint8_t>(c)));
    const auto nearest = [&](float x) {
      const float a = std::fabs(x);
      int code = max_code;
      if (a < values.back()) {
        int best = 0;
        for (int c = 1; c <= max_code; ++c) {
          const float d = std::fabs(values[static_cast<std::size_t>(c)] - a);
          const float db = std::fabs(values[static_cast<std::size_t>(best)] - a);
          if (d < db || (d == db && c % 2 == 0)) best = c;
        }
        code = best;
      }
      return static_cast<std::uint8_t>((std::signbit(x) ? 0x80 : 0) | code);
    };
    std::vector<float> xs;
    for (int c = 0; c < max_code; ++c) {
      const float lo = values[static_cast<std::size_t>(c)],
                  hi = values[static_cast<std::size_t>(c) + 1];
      const float mid = lo + (hi - lo) / 2;  // exact: the codes are a few bits
      for (float x : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)})
        xs.push_back(x);
    }
    std::mt19937 rng(11);
    std::uniform_int_distribution<std::uint32_t> bits(0, 0x7f7fffffu);  // finite, positive
    for (int i = 0; i < 200000; ++i) xs.push_back(kvscope::bit_cast<float>(bits(rng)));
    for (float x : xs) {
      for (float s : {x, -x}) {
        ASSERT_EQ(encode(s), nearest(s)) << what << " " << s;
      }
    }
  };
  check(&e4m3_to_f32, &f32_to_e4m3, 0x7E, "e4m3");
  check(&e5m2_to_f32, &f32_to_e5m2, 0x7B, "e5m2");
}

TEST(NarrowFloats, RandomRelativeErrorWithinHalfAnUlpAndNeverNaN) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-6, 7);  // normal range of every format (E4M3: < 448)
  for (int i = 0; i < 20000; ++i) {
    const float x = std::ldexp(mant(rng), expo(rng)) * (i % 2 ? -1.0f : 1.0f);
    EXPECT_LE(std::fabs(f16_to_f32(f32_to_f16(x)) - x), std::ldexp(std::fabs(x), -11));
    EXPECT_LE(std::fabs(bf16_to_f32(f32_to_bf16(x)) - x), std::ldexp(std::fabs(x), -8));
    EXPECT_LE(std::fabs(e4m3_to_f32(f32_to_e4m3(x)) - x), std::ldexp(std::fabs(x), -4));
    EXPECT_LE(std::fabs(e5m2_to_f32(f32_to_e5m2(x)) - x), std::ldexp(std::fabs(x), -3));
  }
  std::uniform_real_distribution<float> wide(-3e38f, 3e38f);
  for (int i = 0; i < 20000; ++i) {
    const float x = wide(rng);
    ASSERT_TRUE(std::isfinite(f16_to_f32(f32_to_f16(x))));
    ASSERT_TRUE(std::isfinite(bf16_to_f32(f32_to_bf16(x))));
    ASSERT_TRUE(std::isfinite(e4m3_to_f32(f32_to_e4m3(x))));
    ASSERT_TRUE(std::isfinite(e5m2_to_f32(f32_to_e5m2(x))));
  }
}

// The row decoders (F16C on this build when the CPU has it) give the scalar decoder's floats bit
// for bit, for every code, at every alignment and for lengths that leave a scalar tail.
TEST(NarrowFloats, RowDecodersEqualTheScalarOnesForEveryCode) {
  std::vector<std::byte> codes(2 * 65536 + 2);
  for (int offset : {0, 1, 2}) {
    for (std::uint32_t c = 0; c < 65536; ++c) {
      const auto h = static_cast<std::uint16_t>(c);
      std::memcpy(codes.data() + offset + 2 * c, &h, 2);
    }
    for (int n : {65536, 13, 7}) {
      std::vector<float> f16(static_cast<std::size_t>(n)), bf16(static_cast<std::size_t>(n));
      f16_row_to_f32(codes.data() + offset, f16.data(), n);
      bf16_row_to_f32(codes.data() + offset, bf16.data(), n);
      for (int c = 0; c < n; ++c) {
        const auto h = static_cast<std::uint16_t>(c);
        const float want16 = f16_to_f32(h), wantb = bf16_to_f32(h);
        if (std::isnan(want16)) {
          EXPECT_TRUE(std::isnan(f16[static_cast<std::size_t>(c)])) << "fp16 code " << c;
        } else {
          ASSERT_EQ(kvscope::bit_cast<std::uint32_t>(f16[static_cast<std::size_t>(c)]),
                    kvscope::bit_cast<std::uint32_t>(want16))
              << "fp16 code " << c << " offset " << offset;
        }
        ASSERT_EQ(kvscope::bit_cast<std::uint32_t>(bf16[static_cast<std::size_t>(c)]),
                  kvscope::bit_cast<std::uint32_t>(wantb))
            << "bf16 code " << c << " offset " << offset;
      }
    }
  }
}

}  // namespace
}  // namespace kvscope::quant

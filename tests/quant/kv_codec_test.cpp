// KV tile codecs: round-trip error bounds per format through a shuffled paged block table,
// special values, group boundaries, and exact byte accounting.
#include "engine/quant/kv_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "engine/common/error.h"
#include "tests/quant/kv_test_support.h"

namespace kvscope {
namespace {

using test::QuantCache;

// Largest |decoded - x| allowed for x in `head` values of one token (a row of the cache),
// given the min/max of the quantization group x belongs to.
double bound(const KvFormat& f, float x, float head_amax, float group_lo, float group_hi) {
  const double ax = std::fabs(x);
  const double range = static_cast<double>(group_hi) - group_lo;
  const double fp16_slack = std::ldexp(std::fabs(group_lo) + std::fabs(group_hi) + 1e-30, -10);
  switch (f.dtype) {
    case KvDtype::kF32:
      return 0.0;
    case KvDtype::kF16:
      return std::ldexp(ax, -11) + 1e-7;
    case KvDtype::kBF16:
      return std::ldexp(ax, -8) + 1e-30;
    case KvDtype::kFp8E4M3:
      return std::ldexp(ax, -4) + std::ldexp(ax, -8) + head_amax * 1e-5;
    case KvDtype::kFp8E5M2:
      return std::ldexp(ax, -3) + std::ldexp(ax, -8) + head_amax * 1e-5;
    case KvDtype::kInt8:
      return head_amax / 254.0 * 1.01 + head_amax * 1e-3;
    default:
      return range / ((1 << f.bits()) - 1) / 2.0 * 1.01 + fp16_slack;
  }
}

struct Case {
  const char* name;
  int block_size;
};

class RoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(RoundTrip, RandomDataWithinPerFormatBound) {
  const KvFormat f = parse_kv_format(GetParam().name, "test");
  const int B = GetParam().block_size;
  const int T = 100;  // tokens: several blocks, a partial last block, KIVI groups + an open group
  QuantCache cache(f, f, B, T, /*kv_heads=*/4, /*head_dim=*/8);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> rows(T, std::vector<float>(32));  // [T][kv_dim]
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < 32; ++c)
      rows[t][c] = normal(rng) * (c == 5 ? 20.0f : 1.0f);  // outlier channel
    cache.append(rows[t].data(), rows[t].data());
  }
  const int R = f.residual;
  const int open_start = f.is_kivi() ? T - T % R : T;
  for (KvKind kind : {KvKind::kKey, KvKind::kValue}) {
    quant::TileReader reader(cache.view(), 0, kind);
    float tmp[8];
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < 4; ++h) {
        const float* got = reader.head(t, h, tmp);
        float amax = 0;
        for (int i = 0; i < 8; ++i) amax = std::max(amax, std::fabs(rows[t][h * 8 + i]));
        for (int i = 0; i < 8; ++i) {
          const int c = h * 8 + i;
          const float x = rows[t][c];
          float lo = x, hi = x;
          if (f.is_kivi() && kind == KvKind::kKey) {  // channel c over the token group
            const int g0 = t - t % R;
            for (int s = g0; s < g0 + R && s < T; ++s) {
              lo = std::min(lo, rows[s][c]);
              hi = std::max(hi, rows[s][c]);
            }
          } else {  // group of the token's row
            const int g = f.effective_group(32), first = c - c % g;
            for (int j = first; j < first + g; ++j) {
              lo = std::min(lo, rows[t][j]);
              hi = std::max(hi, rows[t][j]);
            }
          }
          const double b = t >= open_start ? 0.0 : bound(f, x, amax, lo, hi);
          ASSERT_LE(std::fabs(got[i] - x), b) << f.name() << " slot " << t << " channel " << c
                                              << (kind == KvKind::kKey ? " K" : " V");
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, RoundTrip,
                         ::testing::Values(Case{"fp32", 16}, Case{"fp16", 16}, Case{"bf16", 16},
                                           Case{"fp8-e4m3", 16}, Case{"fp8-e5m2", 16},
                                           Case{"int8", 16}, Case{"int4", 16}, Case{"int4-g8", 4},
                                           Case{"int4-g4", 16}, Case{"int2-g2", 8},
                                           Case{"int2", 16}, Case{"int2-g16", 1}, Case{"kivi2", 16},
                                           Case{"kivi2", 64}, Case{"kivi4", 8},
                                           Case{"kivi4-r16-g8", 32}, Case{"kivi2-r8", 1}),
                         [](const auto& param_info) {
                           std::string n = std::string(param_info.param.name) + "_b" +
                                           std::to_string(param_info.param.block_size);
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(KvCodec, ZerosConstantsAndHugeValuesAreExactOrFinite) {
  for (const auto& name : kv_format_names()) {
    const KvFormat f = parse_kv_format(name, "test");
    // Zeros are exact everywhere; constants are exact where the group minimum is stored (the
    // asymmetric formats) and within the fp16 scale's rounding where a scale maps amax to max.
    const bool scaled =
        f.dtype == KvDtype::kInt8 || f.dtype == KvDtype::kFp8E4M3 || f.dtype == KvDtype::kFp8E5M2;
    QuantCache cache(f, f, 16, 40, 4, 8);
    std::vector<float> zeros(32, 0.0f), halves(32, 0.5f), huge(32);
    for (int c = 0; c < 32; ++c) huge[c] = (c % 2 ? -3e38f : 3e38f) / static_cast<float>(c + 1);
    for (int t = 0; t < 40; ++t) {
      const std::vector<float>& row = t < 32 ? (t % 2 ? zeros : halves) : huge;
      cache.append(row.data(), row.data());
    }
    quant::TileReader reader(cache.view(), 0, KvKind::kValue);
    float tmp[8];
    for (int t = 0; t < 40; ++t) {
      for (int h = 0; h < 4; ++h) {
        const float* got = reader.head(t, h, tmp);
        for (int i = 0; i < 8; ++i) {
          ASSERT_TRUE(std::isfinite(got[i])) << name << " slot " << t;  // NaN-free saturation
          if (t < 32 && (t % 2 == 1 || !scaled)) {
            ASSERT_EQ(got[i], t % 2 ? 0.0f : 0.5f) << name << " slot " << t;
          } else if (t < 32) {  // amax / max_code rounded to a 16-bit scale: off by <= 2^-9
            ASSERT_NEAR(got[i], 0.5f, 0.5f / 512) << name << " slot " << t;
          }
        }
      }
    }
  }
}

TEST(KvCodec, GroupsAreIndependent) {
  // int4 with groups of 8: a tiny-range group next to a wide-range one keeps its precision.
  const KvFormat f = parse_kv_format("int4-g8", "test");
  QuantCache cache(f, f, 16, 1, 4, 8);
  std::vector<float> row(32);
  for (int c = 0; c < 32; ++c)
    row[c] = c < 8 ? 0.01f * static_cast<float>(c) : 100.0f * static_cast<float>(c - 8);
  cache.append(row.data(), row.data());
  quant::TileReader reader(cache.view(), 0, KvKind::kKey);
  float tmp[8];
  const float* got = reader.head(0, 0, tmp);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(got[i], row[i], 0.07 / 15 / 2 * 1.01 + 1e-4);
}

TEST(KvFormat, ExactBytesForStories260KShape) {
  // kv_heads 4, head_dim 8: a row is 32 values. Tiles of 16 tokens.
  auto tile = [](const char* name, KvKind kind, int B = 16) {
    return parse_kv_format(name, "t").tile_bytes(B, 4, 8, kind);
  };
  EXPECT_EQ(tile("fp32", KvKind::kKey), 16u * 128);
  EXPECT_EQ(tile("fp16", KvKind::kKey), 16u * 64);
  EXPECT_EQ(tile("fp8-e4m3", KvKind::kKey), 16u * (32 + 4 * 2));  // + fp16 scale per head
  EXPECT_EQ(tile("int8", KvKind::kValue), 16u * (32 + 4 * 2));
  EXPECT_EQ(tile("int4", KvKind::kKey), 16u * (16 + 4));  // one group: scale + zero
  EXPECT_EQ(tile("int4-g8", KvKind::kKey), 16u * (16 + 4 * 4));
  EXPECT_EQ(tile("int2", KvKind::kKey), 16u * (8 + 4));
  EXPECT_EQ(tile("kivi2", KvKind::kValue), 16u * (8 + 4));
  EXPECT_EQ(tile("kivi2", KvKind::kKey), 16u * 8 + 32 * 4);          // one channel set per tile
  EXPECT_EQ(tile("kivi2", KvKind::kKey, 64), 64u * 8 + 2 * 32 * 4);  // two groups per tile
  EXPECT_EQ(parse_kv_format("kivi2", "t").staging_bytes_per_sequence(4, 8), 32u * 32 * 4);
  // Llama-3-70B shape: 8 KV heads x 128, fp16 = 2 bytes per value, int8 adds 2 bytes per head.
  EXPECT_EQ(parse_kv_format("fp16", "t").tile_bytes(16, 8, 128), 16u * 2048);
  EXPECT_EQ(parse_kv_format("int8", "t").tile_bytes(16, 8, 128), 16u * (1024 + 16));
  EXPECT_EQ(parse_kv_format("int4", "t").tile_bytes(16, 8, 128), 16u * (512 + 32 * 4));
}

TEST(KvFormat, ParsingAndValidationErrorsNameTheProblem) {
  EXPECT_EQ(parse_kv_format("int4-g16", "x").group_size, 16);
  EXPECT_EQ(parse_kv_format("kivi2-r64-g8", "x").residual, 64);
  EXPECT_EQ(parse_kv_format("kivi2-r64-g8", "x").name(), "kivi2-r64-g8");
  EXPECT_THROW(parse_kv_format("int3", "--kv-dtype"), Error);
  EXPECT_THROW(parse_kv_format("int8-g4", "--kv-dtype"), Error);  // int8 takes no group
  EXPECT_THROW(parse_kv_format("int4-g", "--kv-dtype"), Error);
  EXPECT_THROW(parse_kv_format("fp16-r4", "--kv-dtype"), Error);
  try {
    parse_kv_format("fp9", "--kv-dtype");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-dtype"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("'fp9'"), std::string::npos);
  }
  EXPECT_THROW(parse_kv_format("int4-g12", "x").validate(16, 4, 8, "K format"), Error);
  EXPECT_THROW(parse_kv_format("kivi2-r24", "x").validate(16, 4, 8, "K format"), Error);
  EXPECT_NO_THROW(parse_kv_format("kivi2-r64", "x").validate(16, 4, 8, "K format"));
  EXPECT_NO_THROW(
      parse_kv_format("int4-g64", "x").validate(16, 4, 8, "K format"));  // capped at row
}

}  // namespace
}  // namespace kvscope

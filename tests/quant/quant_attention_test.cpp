// Attention through a quantized paged cache against fp32, KIVI's residual hand-over, and the real
// model generating through every format (fp16/bf16 must still give the golden greedy text).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/common/error.h"
#include "engine/infer/generate.h"
#include "engine/quant/kv_codec.h"
#include "tests/quant/kv_test_support.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

using test::QuantCache;

// Normalized error |out - ref|_1 / |ref|_1 of decode attention over T random tokens.
double attention_error(const KvFormat& k, const KvFormat& v, int block_size) {
  const int T = 150, kv_heads = 4, hd = 8, n_heads = 8;
  test::PortableNormal normal(5);  // the same draws in the browser build's tests (tests/web/)
  QuantCache ref(KvFormat{}, KvFormat{}, block_size, T, kv_heads, hd);
  QuantCache quant(k, v, block_size, T, kv_heads, hd);
  std::vector<float> krow(32), vrow(32), q(64), out_ref(64), out_q(64);  // [kv_dim], [q_dim]
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < 32; ++c) {
      krow[c] = normal() * (c % 8 == 3 ? 8.0f : 1.0f);  // an outlier channel per head
      vrow[c] = normal();
    }
    ref.append(krow.data(), vrow.data());
    quant.append(krow.data(), vrow.data());
  }
  for (float& x : q) x = normal();
  std::vector<float> scratch;
  const AttentionShape shape{n_heads, kv_heads, hd};
  cpu::paged_attention(ref.view(), 0, shape, q.data(), out_ref.data(), T - 1, nullptr, scratch);
  cpu::paged_attention(quant.view(), 0, shape, q.data(), out_q.data(), T - 1, nullptr, scratch);
  double num = 0, den = 0;
  for (int i = 0; i < 64; ++i) {
    num += std::fabs(out_q[i] - out_ref[i]);
    den += std::fabs(out_ref[i]);
  }
  return num / den;
}

TEST(QuantAttention, WithinPerFormatToleranceOfFp32) {
  struct Tol {
    const char* k;
    const char* v;
    double max_err;
  };
  const Tol cases[] = {
      {"fp32", "fp32", 0.0},          {"fp16", "fp16", 2e-3},         {"bf16", "bf16", 2e-2},
      {"fp8-e4m3", "fp8-e4m3", 0.08}, {"fp8-e5m2", "fp8-e5m2", 0.15}, {"int8", "int8", 0.03},
      {"int8", "int4", 0.15},         {"int4", "int4", 0.4},          {"kivi4", "kivi4", 0.15},
      {"kivi2", "kivi2", 0.9},        {"int2", "int2", 1.5}};
  for (const Tol& c : cases) {
    for (int bs : {1, 16, 64}) {
      const double err = attention_error(parse_kv_format(c.k, "t"), parse_kv_format(c.v, "t"), bs);
      EXPECT_LE(err, c.max_err) << c.k << "/" << c.v << " block " << bs;
      if (bs == 16) std::printf("  attention error %s/%s: %.4f\n", c.k, c.v, err);
    }
  }
  // The ordering the formats promise: more bits, less error; per-channel keys beat per-token.
  auto err = [](const char* f) {
    return attention_error(parse_kv_format(f, "t"), parse_kv_format(f, "t"), 16);
  };
  EXPECT_LT(err("fp16"), err("int8"));
  EXPECT_LT(err("int8"), err("int4"));
  EXPECT_LT(err("int4"), err("int2"));
  EXPECT_LT(err("kivi2"), err("int2"));
  EXPECT_GT(err("int2"), 0.0);
}

TEST(Kivi, ResidualStaysExactUntilTheGroupFillsThenHandsOver) {
  for (int bs : {8, 32, 64}) {  // group spans 4 blocks / is one block / half a block
    const KvFormat f = parse_kv_format("kivi2", "t");
    QuantCache cache(f, f, bs, 64, 4, 8);
    test::PortableNormal normal(9);
    std::vector<std::vector<float>> rows(33, std::vector<float>(32));
    float tmp[8];
    for (int t = 0; t < 33; ++t) {
      for (float& x : rows[t]) x = normal();
      cache.append(rows[t].data(), rows[t].data());
      if (t < 31) {
        // Open group: every token so far reads back bit-exact from the fp32 staging.
        quant::TileReader r(cache.view(), 0, KvKind::kKey);
        for (int s = 0; s <= t; ++s) ASSERT_EQ(r.head(s, 1, tmp)[2], rows[s][10]) << "block " << bs;
        EXPECT_EQ(cache.storage().staging_bytes(), 2u * 32 * 32 * 4);  // K and V, one group
      }
    }
    // Token 31 filled the group: quantized now, staging of that group gone, token 32 staged.
    EXPECT_EQ(cache.storage().staging_bytes(), 2u * 32 * 32 * 4);
    EXPECT_EQ(cache.storage().peak_staging_bytes(), 2u * 32 * 32 * 4);
    quant::TileReader r(cache.view(), 0, KvKind::kKey);
    double max_err = 0;
    for (int s = 0; s < 32; ++s) {
      for (int h = 0; h < 4; ++h) {
        const float* got = r.head(s, h, tmp);
        for (int i = 0; i < 8; ++i)
          max_err = std::max(max_err, static_cast<double>(std::fabs(got[i] - rows[s][h * 8 + i])));
      }
    }
    EXPECT_GT(max_err, 0.0) << "block " << bs;  // really 2-bit now
    EXPECT_LT(max_err, 2.0) << "block " << bs;
    EXPECT_EQ(r.head(32, 0, tmp)[0], rows[32][0]);  // the new open group is exact again
  }
}

TEST(Kivi, ContinuingAGroupWithoutItsStagingIsAClearError) {
  const KvFormat f = parse_kv_format("kivi2", "t");
  QuantCache cache(f, f, 16, 64, 4, 8);
  std::vector<float> row(32, 1.0f);
  cache.append(row.data(), row.data());
  cache.storage().drop_staging(0, KvKind::kKey, cache.view().blocks[0], 0);
  EXPECT_THROW(cache.append(row.data(), row.data()), Error);
}

std::string generate_text(const KvFormat& k, const KvFormat& v, AllocatorKind kind,
                          int block_size) {
  const auto& m = test::real_model();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  GenerateOptions o;
  o.steps = 256;
  o.allocator = kind;
  o.block_size = block_size;
  o.k_format = k;
  o.v_format = v;
  std::string out;
  generate(t, *m.tokenizer, o, [&](const std::string& p) { out += p; });
  return out + "\n";
}

TEST(QuantGenerate, Fp16AndBf16KeepTheGoldenGreedyText) {
  const std::string golden =
      test::read_text(test::shared_models_dir() + "/golden/stories260K_greedy256.txt");
  for (const char* name : {"fp16", "bf16"}) {
    const KvFormat f = parse_kv_format(name, "t");
    EXPECT_EQ(generate_text(f, f, AllocatorKind::kPaged, 16), golden) << name;
  }
}

TEST(QuantGenerate, EveryFormatRunsAndPagingDoesNotChangeTheResult) {
  for (const auto& name : kv_format_names()) {
    const KvFormat f = parse_kv_format(name, "t");
    const std::string contiguous = generate_text(f, f, AllocatorKind::kContiguous, 32);
    EXPECT_GT(contiguous.size(), 20u) << name;
    EXPECT_EQ(generate_text(f, f, AllocatorKind::kPaged, 32), contiguous) << name;
  }
  const std::string mixed = generate_text(parse_kv_format("int8", "t"),
                                          parse_kv_format("int4", "t"), AllocatorKind::kPaged, 16);
  EXPECT_GT(mixed.size(), 20u);
}

}  // namespace
}  // namespace kvscope

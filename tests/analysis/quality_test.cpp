// Quality metrics on hand-made distributions, and the evaluator on the real model.
#include "engine/analysis/quality.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/common/error.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

std::vector<double> log_probs(std::vector<double> p) {
  for (double& x : p) x = std::log(x);
  return p;
}

TEST(QualityMath, LogSoftmaxOfHandMadeLogits) {
  const std::vector<float> logits = {0.0f, static_cast<float>(std::log(3.0))};
  std::vector<double> out(2);
  log_softmax(logits, out);
  EXPECT_NEAR(std::exp(out[0]), 0.25, 1e-7);
  EXPECT_NEAR(std::exp(out[1]), 0.75, 1e-7);
  // Shift invariance and no overflow for large logits.
  const std::vector<float> big = {1000.0f, 1000.0f + static_cast<float>(std::log(3.0))};
  log_softmax(big, out);
  EXPECT_NEAR(std::exp(out[1]), 0.75, 1e-4);
}

TEST(QualityMath, KlDivergenceOfHandMadeDistributions) {
  const auto p = log_probs({0.5, 0.5});
  const auto q = log_probs({0.25, 0.75});
  // 0.5 ln(0.5/0.25) + 0.5 ln(0.5/0.75)
  EXPECT_NEAR(kl_divergence(p, q), 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0), 1e-12);
  EXPECT_NEAR(kl_divergence(q, p), 0.25 * std::log(0.5) + 0.75 * std::log(1.5),
              1e-12);  // asymmetric
  EXPECT_EQ(kl_divergence(p, p), 0.0);
  // A zero-probability entry of p contributes nothing.
  const auto r = std::vector<double>{0.0, -INFINITY};
  EXPECT_NEAR(kl_divergence(r, p), std::log(2.0), 1e-12);
}

// Given the reference's probabilities (computed once for all the variants at a position), the KL
// and the accumulator's figures are the same bits as computing them each time.
TEST(QualityMath, KlGivenTheReferenceProbabilitiesIsTheSameBits) {
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 4.0f);
  std::vector<float> a(5000), b(5000);
  QualityAccumulator each, shared;
  for (int trial = 0; trial < 20; ++trial) {
    for (float& x : a) x = d(rng);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = a[i] + 0.1f * d(rng);
    std::vector<double> lp(a.size()), lq(b.size()), p(a.size());
    log_softmax(a, std::span<double>(lp));
    log_softmax(b, std::span<double>(lq));
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = std::exp(lp[i]);
    EXPECT_EQ(kl_divergence(lp, p, lq), kl_divergence(lp, lq)) << "trial " << trial;
    const int target = trial * 7;
    each.add(lp, lq, target);
    shared.add(lp, p, top_token(lp), lq, target);
  }
  EXPECT_EQ(shared.kl_mean(), each.kl_mean());
  EXPECT_EQ(shared.kl_max(), each.kl_max());
  EXPECT_EQ(shared.ppl_variant(), each.ppl_variant());
  EXPECT_EQ(shared.top1_agreement(), each.top1_agreement());
}

TEST(QualityMath, PerplexityAndAccumulator) {
  EXPECT_NEAR(perplexity(2 * std::log(4.0), 2), 4.0, 1e-12);
  QualityAccumulator acc;
  const auto ref = log_probs({0.5, 0.25, 0.25});
  const auto same = ref;
  const auto flipped = log_probs({0.25, 0.5, 0.25});
  acc.add(ref, same, 0);     // agree, target prob 0.5 both
  acc.add(ref, flipped, 1);  // disagree on top-1; target prob 0.25 vs 0.5
  EXPECT_EQ(acc.positions(), 2);
  EXPECT_DOUBLE_EQ(acc.top1_agreement(), 0.5);
  EXPECT_NEAR(acc.ppl_reference(), std::exp((std::log(2.0) + std::log(4.0)) / 2), 1e-12);
  EXPECT_NEAR(acc.ppl_variant(), 2.0, 1e-12);
  const double kl = 0.5 * std::log(2.0) + 0.25 * std::log(0.5);
  EXPECT_NEAR(acc.kl_max(), kl, 1e-12);
  EXPECT_NEAR(acc.kl_mean(), kl / 2, 1e-12);
}

TEST(QualityEval, TextWindowsSplitStoriesAndStartWithBos) {
  const auto& m = test::real_model();
  const auto w = text_windows(
      *m.tokenizer, "One day a cat sat.\n\nThe dog ran to the park and played all day long.\n", 8,
      "t");
  ASSERT_GE(w.size(), 3u);  // the second story is longer than 8 tokens: cut in two or more
  for (const auto& win : w) {
    EXPECT_EQ(win.front(), kTokenBos);
    EXPECT_LE(win.size(), 8u);
  }
  EXPECT_THROW(text_windows(*m.tokenizer, "\n\n  \n", 8, "empty.txt"), Error);
}

TEST(QualityEval, Fp32IsExactAndLossGrowsAsBitsShrink) {
  const auto& m = test::real_model();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  auto windows =
      text_windows(*m.tokenizer,
                   "Once upon a time, there was a little dog named Spot. Spot liked to run in the "
                   "garden and play with his red ball. One day, the ball rolled under a big bush.",
                   512, "t");
  QualityEvaluator eval(t, windows, 16);
  auto report = [&](const char* k, const char* v) {
    auto variant = make_kv_format_variant(parse_kv_format(k, "t"), parse_kv_format(v, "t"), 16);
    return eval.evaluate(*variant);
  };
  const QualityReport fp32 = report("fp32", "fp32");
  EXPECT_EQ(fp32.kl_mean, 0.0);
  EXPECT_EQ(fp32.top1_agreement, 1.0);
  EXPECT_EQ(fp32.ppl_variant, fp32.ppl_reference);
  EXPECT_GT(fp32.ppl_reference, 1.0);
  EXPECT_EQ(fp32.footprint.bytes_per_token, 1280.0);  // 2 x 5 layers x 32 values x 4 bytes
  // The fp32 cache in the reference's blocks is scored as the reference itself; in blocks of
  // another size it runs, and attention's arithmetic does not depend on where blocks end.
  auto fp32_b4 = make_kv_format_variant(KvFormat{}, KvFormat{}, 4);
  EXPECT_FALSE(fp32_b4->is_fp32_cache(16));
  EXPECT_TRUE(make_kv_format_variant(KvFormat{}, KvFormat{}, 16)->is_fp32_cache(16));
  const QualityReport ran = eval.evaluate(*fp32_b4);
  EXPECT_EQ(ran.kl_mean, 0.0);
  EXPECT_EQ(ran.top1_agreement, 1.0);
  EXPECT_EQ(ran.ppl_variant, fp32.ppl_reference);
  EXPECT_EQ(ran.positions, fp32.positions);
  const QualityReport int8 = report("int8", "int8");
  const QualityReport int2 = report("int2", "int2");
  EXPECT_GT(int8.kl_mean, 0.0);
  EXPECT_LT(int8.kl_mean, int2.kl_mean);
  EXPECT_EQ(int8.footprint.bytes_per_token, 400.0);
  const QualityReport kivi = report("kivi2", "kivi2");
  EXPECT_EQ(kivi.footprint.bytes_per_sequence, 2.0 * 5 * 32 * 32 * 4);  // K+V staging, 5 layers
  EXPECT_LT(kivi.kl_mean, int2.kl_mean);
}

}  // namespace
}  // namespace kvscope

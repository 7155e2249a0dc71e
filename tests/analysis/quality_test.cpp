// Quality metrics on hand-made distributions, and the evaluator on the real model.
#include "engine/analysis/quality.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/common/error.h"
#include "engine/infer/step_runner.h"
#include "engine/kv/kv_format.h"
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

// The evaluator scores positions eight at a time; every figure, overall and per bucket, is what
// scoring them one by one with QualityAccumulator::add gives, bit for bit: two windows whose
// scored positions are not a multiple of eight, the first positions left unscored (a prompt),
// buckets of 16, an int2 cache and a KIVI one (a window run in chunks through its decoded copy,
// here against the same tokens run one per step without it).
TEST(QualityEval, ScoresAreThoseOfOnePositionAtATime) {
  const auto& m = test::real_model();
  const ModelConfig& c = m.model->config();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  std::vector<std::vector<int>> windows(2);
  for (int i = 0; i < 83; ++i) windows[0].push_back(i == 0 ? 1 : 1 + (i * 37) % (c.vocab_size - 1));
  for (int i = 0; i < 50; ++i) windows[1].push_back(i == 0 ? 1 : 1 + (i * 11) % (c.vocab_size - 1));
  QualityEvaluator eval(t, windows, 16);
  EvalScope scope;
  scope.score_from = 5;
  scope.bucket_size = 16;
  const auto vocab = static_cast<std::size_t>(c.vocab_size);
  for (const char* f : {"int2", "kivi2-r8"}) {
    const KvFormat F = parse_kv_format(f, "t");
    auto variant = make_kv_format_variant(F, F, 16);
    const QualityReport got = eval.evaluate(*variant, {}, scope);
    // By hand: the reference and the variant a token per step, each position scored alone.
    QualityAccumulator all;
    std::vector<QualityAccumulator> buckets;
    for (const auto& win : windows) {
      SoloSequence ref(kv_layout_for(c, 16, 1, KvFormat{}, KvFormat{}),
                       static_cast<int>(win.size()));
      SoloSequence var(kv_layout_for(c, 16, 1, F, F), static_cast<int>(win.size()));
      for (int pos = 0; pos + 1 < static_cast<int>(win.size()); ++pos) {
        const int token = win[static_cast<std::size_t>(pos)];
        std::vector<double> ref_lp(vocab), var_lp(vocab);
        log_softmax(ref.step(t, token), std::span<double>(ref_lp));
        log_softmax(var.step(t, token), std::span<double>(var_lp));
        if (pos < scope.score_from) continue;
        const int target = win[static_cast<std::size_t>(pos) + 1];
        all.add(ref_lp, var_lp, target);
        const auto b = static_cast<std::size_t>(pos / 16);
        if (buckets.size() <= b) buckets.resize(b + 1);
        buckets[b].add(ref_lp, var_lp, target);
      }
    }
    EXPECT_EQ(got.positions, all.positions()) << f;
    EXPECT_EQ(got.ppl_reference, all.ppl_reference()) << f;
    EXPECT_EQ(got.ppl_variant, all.ppl_variant()) << f;
    EXPECT_EQ(got.kl_mean, all.kl_mean()) << f;
    EXPECT_EQ(got.kl_max, all.kl_max()) << f;
    EXPECT_EQ(got.top1_agreement, all.top1_agreement()) << f;
    ASSERT_EQ(got.buckets.size(), buckets.size()) << f;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      EXPECT_EQ(got.buckets[b].positions, buckets[b].positions()) << f << " bucket " << b;
      EXPECT_EQ(got.buckets[b].ppl_variant, buckets[b].ppl_variant()) << f << " bucket " << b;
      EXPECT_EQ(got.buckets[b].kl_mean, buckets[b].kl_mean()) << f << " bucket " << b;
      EXPECT_EQ(got.buckets[b].top1_agreement, buckets[b].top1_agreement()) << f << " bucket " << b;
    }
  }
}

}  // namespace
}  // namespace kvscope

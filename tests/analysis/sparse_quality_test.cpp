// Sparse attention on the real model (stories260K): with every key kept each selector is dense
// attention bit for bit; with a small k it changes the distributions, attends what it says, and
// the oracle (true top-k) loses least.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/analysis/sparse_quality.h"
#include "engine/backend/backend.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

std::vector<std::vector<int>> windows_of(const LoadedModel& m) {
  return text_windows(*m.tokenizer,
                      "Once upon a time, there was a little dog named Spot. Spot liked to run in "
                      "the garden and play with his red ball. One day, the ball rolled under a big "
                      "bush. Spot barked and barked, but the ball did not come out. His friend the "
                      "cat came to help, and together they pushed the bush until the ball rolled "
                      "back into the sun.",
                      512, "t");
}

SparseOptions options(SelectorKind kind, int k) {
  SparseOptions o;
  o.selector = kind;
  o.topk = k;
  o.proxy_dims = 4;
  return o;
}

TEST(SparseQuality, EveryKeyKeptIsDenseAttentionBitForBit) {
  const auto& m = test::real_model();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  const ModelConfig& c = t.config();
  QualityEvaluator eval(t, windows_of(m), 16);
  const auto channels = proxy_channels(c, m.model->weights(), 4);
  for (SelectorKind kind :
       {SelectorKind::kOracle, SelectorKind::kQuest, SelectorKind::kProxy, SelectorKind::kSparq}) {
    SparseVariant v(options(kind, 512), 16, channels);
    const QualityReport r = eval.evaluate(v);
    EXPECT_EQ(r.kl_mean, 0.0) << v.name();
    EXPECT_EQ(r.ppl_variant, r.ppl_reference) << v.name();
    EXPECT_EQ(r.top1_agreement, 1.0) << v.name();
    const SparseCost cost = v.cost(c);
    EXPECT_EQ(cost.keys_per_query, cost.dense_keys_per_query);
    EXPECT_EQ(cost.kv_bytes, cost.dense_kv_bytes);
    EXPECT_EQ(cost.indexer_macs, 0.0);
  }
  // Every layer left dense: the same, whatever k.
  SparseOptions all_dense = options(SelectorKind::kOracle, 4);
  all_dense.dense_layers = c.n_layers;
  SparseVariant dense(all_dense, 16);
  EXPECT_EQ(eval.evaluate(dense).kl_mean, 0.0);
}

TEST(SparseQuality, ASmallBudgetAttendsKKeysAndTheOracleLosesLeast) {
  const auto& m = test::real_model();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  const ModelConfig& c = t.config();
  const auto windows = windows_of(m);
  QualityEvaluator eval(t, windows, 16);
  const auto channels = proxy_channels(c, m.model->weights(), 4);
  constexpr int kK = 16;
  SparseVariant oracle(options(SelectorKind::kOracle, kK), 16, channels);
  SparseVariant quest(options(SelectorKind::kQuest, kK), 16, channels);
  SparseVariant proxy(options(SelectorKind::kProxy, kK), 16, channels);
  std::vector<CacheVariant*> all = {&oracle, &quest, &proxy};
  const std::vector<QualityReport> r = eval.evaluate_all(all);
  // Query p holds p + 1 live keys; oracle and proxy attend min(k, p + 1) of them.
  double want = 0.0, dense = 0.0;
  long queries = 0;
  for (const auto& w : windows) {
    for (int p = 0; p < static_cast<int>(w.size()); ++p, ++queries) {
      want += std::min(kK, p + 1);
      dense += p + 1;
    }
  }
  want /= static_cast<double>(queries);
  dense /= static_cast<double>(queries);
  for (SparseVariant* v : {&oracle, &proxy}) {
    const SparseCost cost = v->cost(c);
    EXPECT_DOUBLE_EQ(cost.keys_per_query, want) << v->name();
    EXPECT_DOUBLE_EQ(cost.dense_keys_per_query, dense) << v->name();
    EXPECT_LT(cost.attention_macs, cost.dense_macs);
  }
  // Quest attends whole blocks of 16: one block once there are more than 16 keys.
  EXPECT_LE(quest.cost(c).keys_per_query, want);
  for (const QualityReport& q : r) {
    EXPECT_GT(q.kl_mean, 0.0) << q.variant;
    EXPECT_LT(q.top1_agreement, 1.0) << q.variant;
  }
  // Leaving the first layers dense loses less.
  SparseOptions first_dense = options(SelectorKind::kQuest, kK);
  first_dense.dense_layers = 2;
  SparseVariant quest_dense(first_dense, 16);
  EXPECT_LT(eval.evaluate(quest_dense).kl_mean, r[1].kl_mean);
  EXPECT_LT(r[0].kl_mean, r[1].kl_mean);  // the true top-k beats Quest's blocks ...
  EXPECT_LT(r[0].kl_mean, r[2].kl_mean);  // ... and the 4-channel proxy
  // The oracle reads every key to choose: it saves multiply-adds on values only.
  EXPECT_GT(oracle.cost(c).indexer_bytes, 0.0);
  // The index beside the cache: Quest's bounds per block, the proxy's channels per key.
  EXPECT_EQ(oracle.footprint(c).bytes_per_token, 1280.0);  // 2 x 5 layers x 32 x 4 bytes
  EXPECT_EQ(quest.footprint(c).bytes_per_token, 1280.0 + 5 * 4 * 2 * 8 * 4 / 16.0);
  EXPECT_EQ(proxy.footprint(c).bytes_per_token, 1280.0 + 5 * 4 * 4 * 4);
}

}  // namespace
}  // namespace kvscope

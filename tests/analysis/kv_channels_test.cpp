// KvChannelStats: mean and max |x| per channel, the outlier ratio, the top channels; and the
// recording backend sees every K/V row the forward pass stores.
#include "engine/analysis/kv_channels.h"

#include <gtest/gtest.h>

#include <vector>

#include "engine/common/error.h"
#include "engine/infer/transformer.h"
#include "engine/kv/cache_manager.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

TEST(KvChannelStats, APlantedOutlierKeyChannelStandsOutAndValuesDoNot) {
  KvChannelStats s(2, 2, 4);  // 2 layers, 8 channels
  for (int t = 0; t < 10; ++t) {
    std::vector<float> k(8, t % 2 ? 1.0f : -1.0f), v(8, 0.5f);
    k[5] = t % 2 ? 20.0f : -20.0f;  // KV head 1, dim 1
    s.add(1, k.data(), v.data());
  }
  EXPECT_EQ(s.tokens(1), 10);
  EXPECT_EQ(s.tokens(0), 0);
  EXPECT_DOUBLE_EQ(s.mean_abs(KvKind::kKey, 1, 5), 20.0);
  EXPECT_DOUBLE_EQ(s.mean_abs(KvKind::kKey, 1, 0), 1.0);
  EXPECT_FLOAT_EQ(static_cast<float>(s.max_abs(KvKind::kKey, 1, 5)), 20.0f);
  EXPECT_DOUBLE_EQ(s.outlier_ratio(KvKind::kKey, 1), 20.0);
  EXPECT_DOUBLE_EQ(s.outlier_ratio(KvKind::kValue, 1), 1.0);
  EXPECT_EQ(s.outlier_ratio(KvKind::kKey, 0), 0.0);  // no token yet
  const std::vector<int> top = s.top_channels(KvKind::kKey, 1, 2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0], 5);
  EXPECT_EQ(top[1], 0);  // ties in channel order
  EXPECT_THROW(KvChannelStats(0, 1, 1), Error);
}

TEST(KvChannelStats, TheRecordingBackendSeesEveryLayersRowsAndChangesNothing) {
  const auto& m = test::real_model();
  const ModelConfig& c = m.model->config();
  KvChannelStats stats(c.n_layers, c.n_kv_heads, c.head_dim());
  auto cpu = make_cpu_backend(1);
  const std::unique_ptr<Backend> rec = make_channel_stats_backend(*cpu, stats);
  Transformer plain(m.model, *cpu), recorded(m.model, *rec);
  const KvLayout layout = kv_layout_for(c, 16, 2, KvFormat{}, KvFormat{});
  KvCacheManager a(layout, AllocatorKind::kPaged, 32, true),
      b(layout, AllocatorKind::kPaged, 32, true);
  a.require_add_sequence(SeqId(0));
  b.require_add_sequence(SeqId(0));
  int token = 1;
  for (int pos = 0; pos < 20; ++pos) {
    a.require_append_slots(SeqId(0), 1);
    b.require_append_slots(SeqId(0), 1);
    const std::span<const float> xs = plain.forward(token, pos, a.view(SeqId(0)));
    const std::vector<float> x(xs.begin(), xs.end());
    const std::span<const float> y = recorded.forward(token, pos, b.view(SeqId(0)));
    ASSERT_EQ(x.size(), y.size());
    for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], y[i]) << "pos " << pos;
    token = (token * 7 + 3) % c.vocab_size;
  }
  for (int l = 0; l < c.n_layers; ++l) EXPECT_EQ(stats.tokens(l), 20) << "layer " << l;
  EXPECT_GT(stats.outlier_ratio(KvKind::kKey, 0), 1.0);
}

}  // namespace
}  // namespace kvscope

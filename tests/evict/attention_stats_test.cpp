// AttentionRecorder: sink detection on a synthetic pattern, and what stories260K really does.
#include <gtest/gtest.h>

#include "engine/evict/attention_stats.h"
#include "engine/infer/generate.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

TEST(AttentionRecorder, DetectsAPlantedSinkAndNothingElse) {
  AttentionRecorder rec({1, 2, 64}, 512, 4);
  for (int q = 0; q < 64; ++q) {
    std::vector<float> uniform(q + 1, 1.0f / (q + 1));
    std::vector<float> sink(q + 1, q == 0 ? 1.0f : 0.5f / q);
    if (q > 0) sink[0] = 0.5f;
    rec.on_attention(0, 0, q, uniform);
    rec.on_attention(0, 1, q, sink);
  }
  auto sinks = rec.detect_sinks(4.0, 16);
  ASSERT_EQ(sinks.size(), 1u);
  EXPECT_EQ(sinks[0].head, 1);
  EXPECT_EQ(sinks[0].position, 0);
  EXPECT_GT(sinks[0].strength, 10.0);
  EXPECT_FLOAT_EQ(rec.weight(0, 1, 10, 0), 0.5f);
  EXPECT_NEAR(rec.cumulative(0, 0, 63), 1.0f / 64, 1e-6);
}

TEST(AttentionRecorder, TokenStatsFollowSlotPositions) {
  AttentionRecorder rec({1, 1, 16}, 512, 2);
  const std::vector<std::int32_t> positions = {0, 5, 9};
  rec.set_slot_positions(positions);
  rec.on_attention(0, 0, 9, std::vector<float>{0.2f, 0.3f, 0.5f});
  TokenStats t = rec.token_stats(positions);
  EXPECT_FLOAT_EQ(t.cumulative[1], 0.3f);
  EXPECT_FLOAT_EQ(t.last_query[2], 0.5f);
  EXPECT_FLOAT_EQ(t.window_votes[0], 0.2f);
}

// The model card says: attention is strongly local and there is no sink at position 0. The tool
// must report what the model does, so this pins it on the real model.
TEST(AttentionRecorder, Stories260KIsLocalAndHasNoSinkAtPositionZero) {
  const auto& m = test::real_model();
  const ModelConfig& c = m.model->config();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  AttentionRecorder rec({c.n_layers, c.n_heads, 300}, 512, 8);
  KvLayout layout{c.n_layers, c.n_kv_heads, c.head_dim(), 16, 300 / 16 + 1, {}, {}};
  KvCacheManager cache(layout, AllocatorKind::kPaged, 300, true);
  cache.require_add_sequence(SeqId(0));
  Sampler greedy(SamplerConfig{});
  int token = kTokenBos;
  for (int pos = 0; pos < 300; ++pos) {
    cache.require_append_slots(SeqId(0), 1);
    token = greedy.sample(t.forward(token, pos, cache.view(SeqId(0)), &rec));
    if (token == kTokenBos) token = kTokenEos;  // keep going past a story boundary
  }
  for (const SinkReport& s : rec.detect_sinks(4.0, 16))
    EXPECT_NE(s.position, 0) << "layer " << s.layer << " head " << s.head;
  for (int layer : {0, 1, 3}) {
    double mass = 0;
    for (int h = 0; h < c.n_heads; ++h) mass += rec.local_mass(layer, h, 16);
    EXPECT_GT(mass / c.n_heads, 0.5) << "layer " << layer;
  }
}

}  // namespace
}  // namespace kvscope

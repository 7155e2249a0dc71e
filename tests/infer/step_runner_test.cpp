// run_tokens: a window run as batched steps gives, token by token, the logits of the plain
// "append a slot, forward" loop, bit for bit, whatever the step size, in fp32, quantized and
// KIVI pools; SoloSequence, the one-sequence cache built on it, too.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/common/error.h"
#include "engine/infer/step_runner.h"
#include "engine/kv/kv_format.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

std::vector<std::vector<float>> logits_of(const std::string& format, int step_tokens,
                                          int num_tokens = 45) {
  const auto& m = test::real_model();
  const ModelConfig& c = m.model->config();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  const KvFormat f = parse_kv_format(format, "test");
  std::vector<int> tokens;
  for (int i = 0; i < num_tokens; ++i) tokens.push_back(1 + (i * 37) % (c.vocab_size - 1));
  KvLayout layout{c.n_layers, c.n_kv_heads, c.head_dim(), 8, (num_tokens + 7) / 8, f, f};
  KvCacheManager cache(layout, AllocatorKind::kPaged, c.seq_len, true);
  cache.require_add_sequence(SeqId(0));
  std::vector<std::vector<float>> out;
  if (step_tokens == 0) {  // the loop run_tokens replaces
    for (int pos = 0; pos < static_cast<int>(tokens.size()); ++pos) {
      cache.require_append_slots(SeqId(0), 1);
      const std::span<float> l =
          t.forward(tokens[static_cast<std::size_t>(pos)], pos, cache.view(SeqId(0)));
      out.emplace_back(l.begin(), l.end());
    }
    return out;
  }
  int expected = 0;
  run_tokens(
      t, cache, SeqId(0), tokens, 0, nullptr,
      [&](int pos, std::span<const float> l) {
        EXPECT_EQ(pos, expected++);
        out.emplace_back(l.begin(), l.end());
      },
      step_tokens);
  return out;
}

TEST(StepRunner, BatchedWindowEqualsTokenByTokenLoop) {
  for (const char* format : {"fp32", "int4", "kivi2-r8"}) {
    const auto want = logits_of(format, 0);
    for (int step : {1, 7, 32, 64}) {
      const auto got = logits_of(format, step);
      ASSERT_EQ(got.size(), want.size()) << format << " step " << step;
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)), 0)
            << format << " step " << step << " position " << i;
      }
    }
  }
}

// A step longer than Transformer::kMaxStepTokens runs as consecutive sub-steps: same logits.
TEST(StepRunner, StepsLongerThanTheSubStepLimitEqualTheLoop) {
  const int n = static_cast<int>(Transformer::kMaxStepTokens) + 44;
  const auto want = logits_of("fp32", 0, n);
  const auto got = logits_of("fp32", n, n);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)), 0)
        << "position " << i;
  }
}

// SoloSequence: its pool has just the blocks max_tokens need; run() continues from where step()
// stopped (positions counted by size()); both give the plain loop's logits bit for bit.
TEST(StepRunner, SoloSequenceStepsAndRunsContinueOneSequence) {
  const auto& m = test::real_model();
  const ModelConfig& c = m.model->config();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  const auto want = logits_of("int4", 0);
  std::vector<int> tokens;
  for (int i = 0; i < static_cast<int>(want.size()); ++i)
    tokens.push_back(1 + (i * 37) % (c.vocab_size - 1));
  const KvFormat int4 = parse_kv_format("int4", "test");
  SoloSequence seq(kv_layout_for(c, 8, 1, int4, int4), static_cast<int>(tokens.size()));
  EXPECT_EQ(seq.cache().layout().num_blocks, (static_cast<int>(tokens.size()) + 7) / 8);
  std::vector<std::vector<float>> got;
  for (int i = 0; i < 10; ++i) {
    const std::span<const float> l = seq.step(t, tokens[static_cast<std::size_t>(i)]);
    got.emplace_back(l.begin(), l.end());
  }
  EXPECT_EQ(seq.size(), 10);
  int expected = 10;
  seq.run(t, std::span<const int>(tokens).subspan(10), [&](int pos, std::span<const float> l) {
    EXPECT_EQ(pos, expected++);
    got.emplace_back(l.begin(), l.end());
  });
  EXPECT_EQ(seq.size(), static_cast<int>(tokens.size()));
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)), 0)
        << "position " << i;
  }
  // Past the last block's slots the pool is full: one more token is a caller's sizing bug.
  while (seq.size() < seq.cache().layout().num_blocks * 8) seq.step(t, tokens[0]);
  EXPECT_THROW(seq.step(t, tokens[0]), InternalError);
}

// keep_decoded(): the sequence's float copy changes no logit, bit for bit, whether tokens go one
// per step or in chunks (KIVI runs a token per step in any case); it must come before the first
// token.
TEST(StepRunner, SoloSequenceKeepingADecodedCopyGivesTheSameLogits) {
  const auto& m = test::real_model();
  const ModelConfig& c = m.model->config();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  for (const char* format : {"int4", "kivi2-r8"}) {
    const auto want = logits_of(format, 0);
    std::vector<int> tokens;
    for (int i = 0; i < static_cast<int>(want.size()); ++i)
      tokens.push_back(1 + (i * 37) % (c.vocab_size - 1));
    const KvFormat f = parse_kv_format(format, "test");
    SoloSequence seq(kv_layout_for(c, 8, 1, f, f), static_cast<int>(tokens.size()));
    seq.keep_decoded();
    EXPECT_NE(seq.view().decoded, nullptr) << format;
    std::vector<std::vector<float>> got;
    for (int i = 0; i < 10; ++i) {
      const std::span<const float> l = seq.step(t, tokens[static_cast<std::size_t>(i)]);
      got.emplace_back(l.begin(), l.end());
    }
    EXPECT_THROW(seq.keep_decoded(), InternalError);
    seq.run(
        t, std::span<const int>(tokens).subspan(10),
        [&](int, std::span<const float> l) { got.emplace_back(l.begin(), l.end()); }, 7);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)), 0)
          << format << " position " << i;
    }
  }
  // An fp32 pool is read in place: no copy.
  const KvFormat f32 = parse_kv_format("fp32", "test");
  SoloSequence plain(kv_layout_for(c, 8, 1, f32, f32), 16);
  plain.keep_decoded();
  EXPECT_EQ(plain.view().decoded, nullptr);
}

// watch(): a window run 8 (or 5) tokens per step hands the observer every attention row step()
// would, in the same order (a query's rows layer by layer, head by head, before the next query's),
// bit for bit; a step() after it continues the sequence.
TEST(StepRunner, WatchGivesTheObserverTheRowsOfStepByStep) {
  struct Log : AttentionObserver {
    std::vector<float> all;
    void on_attention(int layer, int head, int pos, std::span<const float> w) override {
      all.insert(all.end(), {static_cast<float>(layer), static_cast<float>(head),
                             static_cast<float>(pos), static_cast<float>(w.size())});
      all.insert(all.end(), w.begin(), w.end());
    }
  };
  const auto& m = test::real_model();
  const ModelConfig& c = m.model->config();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  std::vector<int> tokens;
  for (int i = 0; i < 29; ++i) tokens.push_back(1 + (i * 37) % (c.vocab_size - 1));
  const KvFormat int8 = parse_kv_format("int8", "test");
  const KvLayout layout = kv_layout_for(c, 4, 1, int8, int8);
  Log want;
  SoloSequence one_by_one(layout, 30);
  for (int token : tokens) one_by_one.step(t, token, &want);
  one_by_one.step(t, 7, &want);
  for (int step_tokens : {8, 5}) {
    Log got;
    SoloSequence watched(layout, 30);
    watched.watch(t, tokens, got, step_tokens);
    EXPECT_EQ(watched.size(), 29);
    watched.step(t, 7, &got);
    ASSERT_EQ(got.all.size(), want.all.size()) << step_tokens;
    EXPECT_EQ(std::memcmp(got.all.data(), want.all.data(), got.all.size() * sizeof(float)), 0)
        << step_tokens;
  }
}

}  // namespace
}  // namespace kvscope

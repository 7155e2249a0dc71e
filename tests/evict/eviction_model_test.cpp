// Token eviction on the real model (stories260K): a budget that covers the sequence changes
// nothing (logits bit for bit), compaction changes nothing, the pool stays consistent at every
// step, and shifting positions under a sliding window matches keeping them (RoPE is relative).
#include <gtest/gtest.h>

#include <cmath>

#include "engine/analysis/eviction_quality.h"
#include "engine/analysis/quality.h"
#include "engine/common/error.h"
#include "engine/evict/attention_stats.h"
#include "engine/evict/eviction_hook.h"
#include "engine/infer/generate.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

using Logits = std::vector<std::vector<float>>;

std::vector<int> some_tokens(Transformer& t, int n) {
  GenerateOptions o;
  o.sampler.temperature = 1.0f;
  o.sampler.top_p = 1.0f;
  o.sampler.seed = 7;
  std::vector<int> tokens;
  while (static_cast<int>(tokens.size()) < n) {  // stories back to back, as in training
    auto story = generate_tokens(t, {}, 256, o, nullptr);
    tokens.insert(tokens.end(), story.begin(), story.end());
    ++o.sampler.seed;
  }
  tokens.resize(static_cast<std::size_t>(n));
  return tokens;
}

Logits run_variant(Transformer& t, CacheVariant& v, const std::vector<int>& window) {
  Logits out;
  v.run(t, window, [&](int, std::span<const float> l) { out.emplace_back(l.begin(), l.end()); });
  return out;
}

EvictionRunOptions eviction(EvictionKind kind, int budget, int block_size = 16) {
  EvictionRunOptions o;
  o.evictor.policy.kind = kind;
  o.evictor.policy.budget = budget;
  o.evictor.policy.sinks = 4;
  o.block_size = block_size;
  return o;
}

const std::vector<EvictionKind> kAllPolicies = {EvictionKind::kWindow, EvictionKind::kSinksWindow,
                                                EvictionKind::kH2O,    EvictionKind::kSnapKV,
                                                EvictionKind::kTova,   EvictionKind::kRandom};

class EvictionModel : public ::testing::Test {
 protected:
  EvictionModel() : backend_(make_cpu_backend(1)), t_(test::real_model().model, *backend_) {}
  std::unique_ptr<Backend> backend_;
  Transformer t_;
};

TEST_F(EvictionModel, BudgetCoveringTheSequenceIsIdenticalToNoEviction) {
  const auto window = some_tokens(t_, 200);
  auto fp32 = make_kv_format_variant(KvFormat{}, KvFormat{}, 16);
  const Logits ref = run_variant(t_, *fp32, window);
  for (EvictionKind kind : kAllPolicies) {
    for (int budget : {200, 512}) {
      EvictionRunOptions o = eviction(kind, budget);
      o.evictor.compaction = CompactionPolicy::kAlways;
      o.evictor.positions = PositionMode::kShift;
      EvictionVariant v(o);
      const Logits got = run_variant(t_, v, window);
      ASSERT_EQ(got.size(), ref.size());
      for (std::size_t p = 0; p < ref.size(); ++p) {
        ASSERT_EQ(got[p], ref[p]) << v.name() << " position " << p;  // bit for bit
      }
      EXPECT_EQ(v.stats().tokens_evicted, 0);
    }
  }
}

// evaluate_all runs the eviction variants in lockstep, one engine step per position for all of
// them: every figure and statistic equals evaluating each alone, bit for bit, and a variant that
// runs its own way (a K/V format, KIVI included) is evaluated alone in its place.
TEST_F(EvictionModel, VariantsInLockstepEqualEachEvaluatedAlone) {
  const auto tokens = some_tokens(t_, 300);
  std::vector<std::vector<int>> windows = {{tokens.begin(), tokens.begin() + 170},
                                           {tokens.begin() + 170, tokens.end()}};
  windows[1].insert(windows[1].begin(), 1);  // each window starts with BOS
  QualityEvaluator eval(t_, windows, 16);
  std::vector<EvictionRunOptions> options;
  for (EvictionKind kind : kAllPolicies) options.push_back(eviction(kind, 48));
  options[2].evictor.compaction = CompactionPolicy::kAlways;  // h2o: compacted, shifted
  options[2].evictor.positions = PositionMode::kShift;
  options[3].context = 100;  // snapkv: compress once after a 100-token prompt
  EvalScope scope;
  scope.bucket_size = 64;
  std::vector<std::unique_ptr<EvictionVariant>> together, alone;
  std::vector<CacheVariant*> all;
  // The K/V formats run their windows on their own, in chunks: KIVI's too (through its decoded
  // copy, which keeps each query's open group as written).
  auto fp16 =
      make_kv_format_variant(parse_kv_format("fp16", "t"), parse_kv_format("fp16", "t"), 16);
  auto kivi =
      make_kv_format_variant(parse_kv_format("kivi2", "t"), parse_kv_format("kivi2", "t"), 16);
  EXPECT_FALSE(fp16->has_stepper());
  EXPECT_FALSE(kivi->has_stepper());
  for (std::size_t i = 0; i < options.size(); ++i) {
    together.push_back(std::make_unique<EvictionVariant>(options[i]));
    alone.push_back(std::make_unique<EvictionVariant>(options[i]));
    all.push_back(together.back().get());
    if (i == 1) all.push_back(fp16.get());
    if (i == 2) all.push_back(kivi.get());
  }
  long last = 0, total = 0;
  const std::vector<QualityReport> got = eval.evaluate_all(
      all,
      [&](long d, long n) {
        EXPECT_GT(d, last);
        last = d;
        total = n;
      },
      scope);
  ASSERT_EQ(got.size(), all.size());
  EXPECT_EQ(last, total);
  EXPECT_EQ(total, eval.num_positions() * static_cast<long>(all.size()));
  const auto same = [](const QualityReport& a, const QualityReport& b) {
    EXPECT_EQ(a.variant, b.variant);
    EXPECT_EQ(a.positions, b.positions);
    EXPECT_EQ(a.ppl_variant, b.ppl_variant) << a.variant;
    EXPECT_EQ(a.kl_mean, b.kl_mean) << a.variant;
    EXPECT_EQ(a.kl_max, b.kl_max) << a.variant;
    EXPECT_EQ(a.top1_agreement, b.top1_agreement) << a.variant;
    ASSERT_EQ(a.buckets.size(), b.buckets.size()) << a.variant;
    for (std::size_t k = 0; k < a.buckets.size(); ++k)
      EXPECT_EQ(a.buckets[k].ppl_variant, b.buckets[k].ppl_variant) << a.variant << " bucket " << k;
  };
  std::size_t at = 0;
  for (std::size_t i = 0; i < options.size(); ++i, ++at) {
    EvalScope own = scope;
    own.score_from = 0;
    same(got[at], eval.evaluate(*alone[i], {}, own));
    const EvictionRunStats &a = together[i]->stats(), &b = alone[i]->stats();
    EXPECT_EQ(a.tokens_evicted, b.tokens_evicted) << got[at].variant;
    EXPECT_GT(a.tokens_evicted, 0) << got[at].variant;
    EXPECT_EQ(a.slots_moved, b.slots_moved) << got[at].variant;
    EXPECT_EQ(a.keys_rotated, b.keys_rotated) << got[at].variant;
    EXPECT_EQ(a.peak_kv_bytes, b.peak_kv_bytes) << got[at].variant;
    EXPECT_EQ(a.mean_attended, b.mean_attended) << got[at].variant;
    if (i == 1) same(got[++at], eval.evaluate(*fp16, {}, scope));
    if (i == 2) same(got[++at], eval.evaluate(*kivi, {}, scope));
  }
}

TEST_F(EvictionModel, CompactionMovesBytesButLeavesLogitsWithinRounding) {
  const auto window = some_tokens(t_, 160);
  for (EvictionKind kind : {EvictionKind::kH2O, EvictionKind::kTova, EvictionKind::kRandom}) {
    EvictionRunOptions o = eviction(kind, 40, 8);
    EvictionVariant never(o);
    const Logits a = run_variant(t_, never, window);
    for (auto policy : {CompactionPolicy::kHalfEmpty, CompactionPolicy::kAlways}) {
      o.evictor.compaction = policy;
      EvictionVariant compacted(o);
      const Logits b = run_variant(t_, compacted, window);
      // Compaction changes where live slots sit in the score array, hence the grouping of the
      // vectorized softmax sum: equal up to float rounding, not bit for bit.
      ASSERT_EQ(a.size(), b.size());
      double worst = 0.0;
      for (std::size_t p = 0; p < a.size(); ++p)
        for (std::size_t i = 0; i < a[p].size(); ++i)
          worst = std::max(worst, static_cast<double>(std::fabs(a[p][i] - b[p][i])));
      EXPECT_LT(worst, 1e-4) << compacted.name();  // logits reach |20|: ~5e-6 relative
      EXPECT_GT(compacted.stats().slots_moved, 0) << compacted.name();
      EXPECT_LE(compacted.stats().peak_blocks, never.stats().peak_blocks) << compacted.name();
    }
    EXPECT_GT(never.stats().tokens_evicted, 0);
  }
}

TEST_F(EvictionModel, PoolStaysConsistentAndQueriesSeeAtMostTheBudget) {
  const auto window = some_tokens(t_, 120);
  const ModelConfig& c = t_.config();
  for (EvictionKind kind : kAllPolicies) {
    for (auto compaction : {CompactionPolicy::kNever, CompactionPolicy::kHalfEmpty}) {
      const int budget = 20, bs = 4;
      KvLayout layout = kv_layout_for(c, bs, 64, KvFormat{}, KvFormat{});
      KvCacheManager cache(layout, AllocatorKind::kPaged, 1 << 20, true);
      cache.require_add_sequence(SeqId(0));
      EvictorOptions eo = eviction(kind, budget).evictor;
      eo.compaction = compaction;
      TokenEvictor ev(cache, SeqId(0), eo, c.rope_theta, *backend_);
      AttentionRecorder rec({c.n_layers, c.n_heads, 120}, 0, eo.policy.observation_window);
      for (int pos = 0; pos < 120; ++pos) {
        ASSERT_TRUE(cache.append_slots(SeqId(0), 1));
        const KvSeqView v = ev.view();
        ASSERT_LE(ev.num_live(), budget);
        rec.set_slot_positions(ev.slot_tokens());
        TokenIndexObserver obs(rec, ev.slot_tokens().back());
        t_.forward(window[static_cast<std::size_t>(pos)], ev.slot_positions().back(), v, &obs);
        ev.after_token(&rec);
        cache.check_invariants();
        // Blocks held are exactly those the slots need; none of them is entirely evicted.
        ASSERT_EQ(cache.pool().num_used(), cache.blocks_for(cache.table(SeqId(0)).num_tokens));
      }
      EXPECT_EQ(ev.num_live(), budget - 1);
      EXPECT_LE(cache.pool().num_used(), 64);
    }
  }
}

TEST_F(EvictionModel, SlidingWindowGivesTheSameAnswersWithShiftedPositions) {
  // Under a pure window the query and every key move together, so RoPE's relative angles are the
  // same either way; only the float rounding of re-rotating cached keys differs.
  const auto window = some_tokens(t_, 180);
  EvictionRunOptions o = eviction(EvictionKind::kWindow, 32);
  EvictionVariant keep(o);
  o.evictor.positions = PositionMode::kShift;
  EvictionVariant shift(o);
  const Logits a = run_variant(t_, keep, window), b = run_variant(t_, shift, window);
  float worst = 0.0f;
  int argmax_same = 0;
  for (std::size_t p = 0; p < a.size(); ++p) {
    for (std::size_t i = 0; i < a[p].size(); ++i)
      worst = std::max(worst, std::fabs(a[p][i] - b[p][i]));
    argmax_same += std::max_element(a[p].begin(), a[p].end()) - a[p].begin() ==
                   std::max_element(b[p].begin(), b[p].end()) - b[p].begin();
  }
  EXPECT_GT(shift.stats().keys_rotated, 0);
  EXPECT_LT(worst, 1e-2f);
  EXPECT_EQ(argmax_same, static_cast<int>(a.size()));
  // Sinks + window is not shift-invariant: the sinks' distance to the query changes.
  o = eviction(EvictionKind::kSinksWindow, 32);
  EvictionVariant sinks_keep(o);
  o.evictor.positions = PositionMode::kShift;
  EvictionVariant sinks_shift(o);
  EXPECT_NE(run_variant(t_, sinks_keep, window), run_variant(t_, sinks_shift, window));
}

// The memory axis of the UI's Pareto plot: each window's peak block bytes, summed over windows and
// divided by their tokens, equals the same figure from one fresh variant per window; the
// whole-run peak is the largest window peak; a covering budget holds the full cache's blocks.
TEST_F(EvictionModel, PeakBytesPerContextTokenSumsEachWindowsPeak) {
  const std::vector<std::vector<int>> windows = {some_tokens(t_, 150), some_tokens(t_, 61),
                                                 some_tokens(t_, 97)};
  const KvLayout L = kv_layout_for(t_.config(), 16, 1, KvFormat{}, KvFormat{});
  for (EvictionKind kind : {EvictionKind::kWindow, EvictionKind::kH2O}) {
    for (int budget : {16, 40, 1000}) {
      const EvictionRunOptions o = eviction(kind, budget);
      EvictionVariant all(o);
      double peak_sum = 0.0;
      long tokens = 0;
      std::size_t largest = 0;
      for (const auto& w : windows) {
        run_variant(t_, all, w);
        EvictionVariant alone(o);
        run_variant(t_, alone, w);
        peak_sum += static_cast<double>(alone.stats().peak_kv_bytes);
        largest = std::max(largest, alone.stats().peak_kv_bytes);
        tokens += static_cast<long>(w.size());
        if (budget >= static_cast<int>(w.size())) {  // nothing evicted: every block of the window
          EXPECT_EQ(alone.stats().peak_kv_bytes, (w.size() + 15) / 16 * L.block_bytes());
        }
      }
      EXPECT_EQ(all.stats().window_tokens, tokens);
      EXPECT_DOUBLE_EQ(all.stats().peak_bytes_per_context_token(),
                       peak_sum / static_cast<double>(tokens));
      EXPECT_EQ(all.stats().peak_kv_bytes, largest);
      if (budget < 61) {
        EXPECT_LT(all.stats().peak_bytes_per_context_token(), L.bytes_per_token()) << all.name();
      } else {
        EXPECT_GE(all.stats().peak_bytes_per_context_token(), L.bytes_per_token()) << all.name();
      }
    }
  }
}

TEST_F(EvictionModel, LongTextWindowsStartWithBosAndCoverTheStream) {
  const auto& m = test::real_model();
  const std::string text =
      "Tom had a red ball.\n\nLily saw a big dog. The dog was happy.\n\nThe end.";
  const auto windows = long_text_windows(*m.tokenizer, text, 8, "test");
  long tokens = 0;
  for (const auto& w : windows) {
    EXPECT_EQ(w.front(), kTokenBos);
    EXPECT_LE(w.size(), 8u);
    tokens += static_cast<long>(w.size()) - 1;
  }
  long stream = 0;
  for (const auto& s : text_windows(*m.tokenizer, text, 1 << 20, "test"))
    stream += static_cast<long>(s.size());
  EXPECT_EQ(tokens, stream - 1);  // every token after the first BOS, once
}

}  // namespace
}  // namespace kvscope

namespace kvscope {
namespace {

TEST_F(EvictionModel, GenerationWithACoveringBudgetGivesTheSameTokensAndLogits) {
  const ModelConfig& c = t_.config();
  GenerateOptions o;
  o.allocator = AllocatorKind::kPaged;
  o.sampler.temperature = 1.0f;
  o.sampler.seed = 11;
  std::vector<std::vector<float>> ref_logits;
  const auto ref = generate_tokens(t_, {}, 150, o, &ref_logits);
  for (EvictionKind kind : kAllPolicies) {
    for (int budget : {150, 151}) {  // 150: one trim after the last token, seen by no query
      EvictorOptions eo = eviction(kind, budget).evictor;
      EvictingCacheHook hook(eo, c, 150);
      o.cache_hook = &hook;
      std::vector<std::vector<float>> logits;
      EXPECT_EQ(generate_tokens(t_, {}, 150, o, &logits), ref) << eviction_kind_name(kind);
      EXPECT_EQ(logits, ref_logits) << eviction_kind_name(kind);
      EXPECT_EQ(hook.evictor().counters().tokens_evicted, budget == 150 ? 1 : 0);
    }
  }
}

TEST_F(EvictionModel, GenerationPastTheTrainedContextRunsDenseOrEvicting) {
  const ModelConfig& c = t_.config();
  GenerateOptions o;
  o.allocator = AllocatorKind::kPaged;
  o.sampler.temperature = 1.0f;
  o.sampler.seed = 5;
  o.past_context = true;
  o.score_tokens = true;
  o.stop_at_bos = false;
  o.steps = c.seq_len + 100;
  const auto& tok = *test::real_model().tokenizer;
  const GenerateResult dense = generate(t_, tok, o, [](const std::string&) {});
  EXPECT_EQ(static_cast<int>(dense.tokens.size()), o.steps + 1);
  EXPECT_EQ(dense.next_logprob.size(), static_cast<std::size_t>(o.steps));
  EvictingCacheHook hook(eviction(EvictionKind::kSinksWindow, 64).evictor, c, o.steps);
  o.cache_hook = &hook;
  const GenerateResult evicting = generate(t_, tok, o, [](const std::string&) {});
  EXPECT_EQ(static_cast<int>(evicting.tokens.size()), o.steps + 1);
  EXPECT_EQ(hook.evictor().num_live(), 63);
  // 63 live tokens: sinks in block 0 plus the window's blocks, far below the dense cache.
  EXPECT_LE(evicting.peak_kv_bytes, dense.peak_kv_bytes / 5);
  for (float lp : evicting.next_logprob) EXPECT_TRUE(std::isfinite(lp) && lp <= 0.0f);
  o.steps = c.seq_len + 1;
  o.past_context = false;
  EXPECT_THROW(generate(t_, tok, o, [](const std::string&) {}), Error);
}

}  // namespace
}  // namespace kvscope

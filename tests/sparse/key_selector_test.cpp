// The selectors of sparse attention on hand-built patterns: the rules as pure functions (top-k,
// Quest's bound and block choice, the proxy's channels), then a selector on the view of a small
// paged cache through the CPU backend's attention, against softmax over the picked slots.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/common/error.h"
#include "engine/model/checkpoint.h"
#include "engine/quant/kv_codec.h"
#include "engine/sparse/key_selector.h"
#include "tests/quant/kv_test_support.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

TEST(SparseRules, TopSlotsAreTheHighestRanksInSlotOrderTiesToTheLowerSlot) {
  const std::vector<float> rank = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f, 3.0f, 0.0f};
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6};
  EXPECT_EQ(top_slots(rank, all, 2), (std::vector<int>{1, 3}));  // three tie at 3.0: the lower two
  EXPECT_EQ(top_slots(rank, all, 4), (std::vector<int>{1, 3, 4, 5}));
  EXPECT_EQ(top_slots(rank, all, 0), std::vector<int>{});
  EXPECT_EQ(top_slots(rank, all, 99).size(), all.size());
  // Only candidates compete: slot 1 is not one.
  const std::vector<int> some = {0, 2, 4, 6};
  EXPECT_EQ(top_slots(rank, some, 2), (std::vector<int>{0, 4}));
}

TEST(SparseRules, QuestBoundIsAtLeastEveryScoreInTheBlockAndTightForOneKey) {
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  constexpr int kD = 16, kKeys = 9;
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> q(kD), keys(kKeys * kD);
    for (float& x : q) x = d(rng);
    for (float& x : keys) x = d(rng);
    std::vector<float> mins(kD, INFINITY), maxs(kD, -INFINITY);
    float best = -INFINITY;
    for (int t = 0; t < kKeys; ++t) {
      double s = 0.0;
      for (int i = 0; i < kD; ++i) {
        const float k = keys[static_cast<std::size_t>(t * kD + i)];
        mins[static_cast<std::size_t>(i)] = std::min(mins[static_cast<std::size_t>(i)], k);
        maxs[static_cast<std::size_t>(i)] = std::max(maxs[static_cast<std::size_t>(i)], k);
        s += static_cast<double>(q[static_cast<std::size_t>(i)]) * k;
      }
      best = std::max(best, static_cast<float>(s / std::sqrt(double(kD))));
    }
    const float bound = quest_bound(q.data(), mins.data(), maxs.data(), kD);
    EXPECT_GE(bound, best) << trial;
    // One key: min = max = the key, and the bound is its score.
    const float one = quest_bound(q.data(), keys.data(), keys.data(), kD);
    double s = 0.0;
    for (int i = 0; i < kD; ++i) s += double(q[static_cast<std::size_t>(i)]) * keys[i];
    EXPECT_NEAR(one, s / 4.0, 1e-5);
  }
}

TEST(SparseRules, QuestTakesBlocksByBoundWhileTheyFitTheBudget) {
  const std::vector<float> bounds = {1.0f, 5.0f, 3.0f, 5.0f, -2.0f};
  const std::vector<int> sizes = {4, 4, 4, 4, 2};
  EXPECT_EQ(quest_blocks(bounds, sizes, 8), (std::vector<int>{1, 3}));   // tie: block 1 first
  EXPECT_EQ(quest_blocks(bounds, sizes, 11), (std::vector<int>{1, 3}));  // block 2 does not fit
  EXPECT_EQ(quest_blocks(bounds, sizes, 12), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(quest_blocks(bounds, sizes, 3), std::vector<int>{});
  EXPECT_EQ(quest_blocks(bounds, sizes, 18).size(), 5u);
}

TEST(SparseRules, ProxyChannelsAreThePairsWithTheLargestWeightNorms) {
  // One layer, 2 query heads on 1 KV head, head_dim 8 (4 RoPE pairs), dim 4.
  ModelConfig c;
  c.dim = 4;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim_override = 8;
  std::vector<float> wq(static_cast<std::size_t>(c.q_dim() * c.dim), 0.1f);
  std::vector<float> wk(static_cast<std::size_t>(c.kv_dim() * c.dim), 0.1f);
  // Pair 2 (dims 4, 5) of W_k is large; pair 1 (dims 2, 3) of head 1's W_q larger still.
  for (int r = 4; r < 6; ++r)
    for (int j = 0; j < c.dim; ++j) wk[static_cast<std::size_t>(r * c.dim + j)] = 2.0f;
  for (int r = 8 + 2; r < 8 + 4; ++r)
    for (int j = 0; j < c.dim; ++j) wq[static_cast<std::size_t>(r * c.dim + j)] = 50.0f;
  Weights w;
  w.wq = wq.data();
  w.wk = wk.data();
  const auto two = proxy_channels(c, w, 2);
  ASSERT_EQ(two.size(), 1u);
  EXPECT_EQ(two[0], (std::vector<int>{2, 3}));  // 50 x 0.1 x ... beats 2 x 0.1 x ...
  EXPECT_EQ(proxy_channels(c, w, 4)[0], (std::vector<int>{2, 3, 4, 5}));
}

TEST(SparseRules, OptionsAreCheckedInTheEnginesWords) {
  ModelConfig c;
  c.dim = 64;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.n_layers = 1;
  SparseOptions o;
  o.topk = 0;
  EXPECT_EQ(test::error_of([&] { validate(o, c, 16); }),
            "sparse attention's k: expected integers >= 1 (keys per query), got 0");
  o.topk = 8;
  o.selector = SelectorKind::kQuest;
  EXPECT_NE(test::error_of([&] {
              validate(o, c, 16);
            }).find("expected at least the block size 16 for quest (it attends whole blocks)"),
            std::string::npos);
  EXPECT_NO_THROW(validate(o, c, 8));
  o.selector = SelectorKind::kProxy;
  o.proxy_dims = 3;
  EXPECT_NE(test::error_of([&] { validate(o, c, 16); }).find("an even number in [2, 16]"),
            std::string::npos);
  EXPECT_NE(test::error_of([] {
              parse_selector_kind("h2o", "--selector");
            }).find("expected oracle, quest, proxy or sparq"),
            std::string::npos);
  EXPECT_EQ(parse_selector_kind("quest", "--selector"), SelectorKind::kQuest);
}

// ---- a selector on the CPU backend's attention ----

constexpr int kHeads = 4, kKvHeads = 2, kHeadDim = 8, kTokens = 24, kBlock = 4;

ModelConfig tiny_config() {
  ModelConfig c;
  c.dim = kHeads * kHeadDim;
  c.n_layers = 1;
  c.n_heads = kHeads;
  c.n_kv_heads = kKvHeads;
  return c;
}

struct Case {
  std::vector<float> k, v, q;  // [tokens][kv_dim], [tokens][kv_dim], [heads][head_dim]
};

Case random_case(unsigned seed) {
  test::PortableNormal d(seed);
  Case c;
  for (int i = 0; i < kTokens * kKvHeads * kHeadDim; ++i) c.k.push_back(d());
  for (int i = 0; i < kTokens * kKvHeads * kHeadDim; ++i) c.v.push_back(d());
  for (int i = 0; i < kHeads * kHeadDim; ++i) c.q.push_back(d());
  return c;
}

double score(const Case& c, int h, int t) {
  const int g = h / (kHeads / kKvHeads);
  double s = 0.0;
  for (int i = 0; i < kHeadDim; ++i) {
    s += double(c.q[static_cast<std::size_t>(h * kHeadDim + i)]) *
         c.k[static_cast<std::size_t>((t * kKvHeads + g) * kHeadDim + i)];
  }
  return s / std::sqrt(double(kHeadDim));
}

// softmax over the slots allowed[h][t] of head h, in double.
std::vector<double> reference(const Case& c, const std::vector<std::vector<bool>>& allowed) {
  std::vector<double> out(static_cast<std::size_t>(kHeads * kHeadDim), 0.0);
  for (int h = 0; h < kHeads; ++h) {
    const int g = h / (kHeads / kKvHeads);
    double mx = -INFINITY, sum = 0.0;
    for (int t = 0; t < kTokens; ++t)
      if (allowed[static_cast<std::size_t>(h)][static_cast<std::size_t>(t)])
        mx = std::max(mx, score(c, h, t));
    for (int t = 0; t < kTokens; ++t) {
      if (!allowed[static_cast<std::size_t>(h)][static_cast<std::size_t>(t)]) continue;
      const double w = std::exp(score(c, h, t) - mx);
      sum += w;
      for (int i = 0; i < kHeadDim; ++i) {
        out[static_cast<std::size_t>(h * kHeadDim + i)] +=
            w * c.v[static_cast<std::size_t>((t * kKvHeads + g) * kHeadDim + i)];
      }
    }
    for (int i = 0; i < kHeadDim; ++i) out[static_cast<std::size_t>(h * kHeadDim + i)] /= sum;
  }
  return out;
}

class SelectorOnCache : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const KvFormat f = parse_kv_format(GetParam(), "test");
    cache_ = std::make_unique<test::QuantCache>(f, f, kBlock, kTokens, kKvHeads, kHeadDim);
  }
  // Writes c's keys and values; returns c with them as the cache holds them (dequantized), which
  // the references read: a quantized cache's selector ranks its own keys.
  Case fill(const Case& c) {
    for (int t = 0; t < kTokens; ++t) {
      cache_->append(&c.k[static_cast<std::size_t>(t * kKvHeads * kHeadDim)],
                     &c.v[static_cast<std::size_t>(t * kKvHeads * kHeadDim)]);
    }
    Case stored = c;
    const quant::TileReader keys(cache_->view(), 0, KvKind::kKey);
    const quant::TileReader values(cache_->view(), 0, KvKind::kValue);
    float tmp[kHeadDim];
    for (int t = 0; t < kTokens; ++t) {
      for (int g = 0; g < kKvHeads; ++g) {
        const std::size_t at = static_cast<std::size_t>((t * kKvHeads + g) * kHeadDim);
        std::copy_n(keys.head(t, g, tmp), kHeadDim, stored.k.begin() + static_cast<long>(at));
        std::copy_n(values.head(t, g, tmp), kHeadDim, stored.v.begin() + static_cast<long>(at));
      }
    }
    return stored;
  }
  // Attention of c.q over the cache with `selector` (nullptr: dense).
  std::vector<float> attend(const Case& c, SparseSelector* selector) {
    KvSeqView view = cache_->view();
    if (selector != nullptr) {
      selector->begin_query(view.num_slots);
      view.selector = selector;
    }
    std::vector<float> out(static_cast<std::size_t>(kHeads * kHeadDim)), scratch;
    cpu::paged_attention(view, 0, {kHeads, kKvHeads, kHeadDim}, c.q.data(), out.data(), kTokens - 1,
                         nullptr, scratch);
    if (selector != nullptr) selector->end_query();
    return out;
  }
  std::unique_ptr<test::QuantCache> cache_;
};

TEST_P(SelectorOnCache, EveryKeyKeptIsDenseAttentionBitForBit) {
  const Case c = random_case(7);
  (void)fill(c);
  const std::vector<float> dense = attend(c, nullptr);
  for (SelectorKind kind :
       {SelectorKind::kOracle, SelectorKind::kQuest, SelectorKind::kProxy, SelectorKind::kSparq}) {
    SparseOptions o;
    o.selector = kind;
    o.topk = kTokens;
    o.proxy_dims = 4;
    SparseSelector s(tiny_config(), o, {{0, 1, 2, 3}, {4, 5, 6, 7}});
    EXPECT_EQ(attend(c, &s), dense) << selector_kind_name(kind);
    EXPECT_EQ(s.stats().keys_attended, double(kHeads * kTokens));
    EXPECT_EQ(s.stats().keys_read, double(kKvHeads * kTokens));
    EXPECT_EQ(s.stats().indexer_macs, 0.0);  // nothing to choose
  }
}

TEST_P(SelectorOnCache, TheOraclePicksEachHeadsTrueTopKAndForcedSlots) {
  const Case c = fill(random_case(8));
  SparseOptions o;
  o.topk = 7;
  o.sinks = 2;
  o.recent = 1;
  SparseSelector s(tiny_config(), o);
  const std::vector<float> out = attend(c, &s);
  std::vector<std::vector<bool>> allowed(kHeads, std::vector<bool>(kTokens, false));
  double attended = 0.0;
  for (int h = 0; h < kHeads; ++h) {
    auto& a = allowed[static_cast<std::size_t>(h)];
    a[0] = a[1] = a[kTokens - 1] = true;  // sinks and the query's own slot
    std::vector<int> rest(kTokens - 3);
    std::iota(rest.begin(), rest.end(), 2);
    std::stable_sort(rest.begin(), rest.end(),
                     [&](int x, int y) { return score(c, h, x) > score(c, h, y); });
    for (int i = 0; i < 4; ++i)
      a[static_cast<std::size_t>(rest[static_cast<std::size_t>(i)])] = true;
    const auto picked = s.picked(0, h);
    for (int t = 0; t < kTokens; ++t) {
      EXPECT_EQ(picked[static_cast<std::size_t>(t)] != 0, a[static_cast<std::size_t>(t)])
          << "head " << h << " slot " << t;
    }
    attended += 7;
  }
  const std::vector<double> want = reference(c, allowed);
  for (std::size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-5) << i;
  EXPECT_EQ(s.stats().keys_attended, attended);
  EXPECT_EQ(s.stats().keys_dense, double(kHeads * kTokens));
  EXPECT_EQ(s.stats().indexer_macs, double(kHeads * kTokens * kHeadDim));  // every score
  EXPECT_EQ(s.stats().indexer_elems, double(kKvHeads * kTokens * kHeadDim));
  // A group reads the union of its two heads' picks: at least 7 keys, at most 14.
  EXPECT_GE(s.stats().keys_read, 2.0 * 7);
  EXPECT_LE(s.stats().keys_read, 2.0 * 14);
}

TEST_P(SelectorOnCache, QuestFindsTheBlockOfAPlantedKeyAndAttendsWholeBlocks) {
  Case planted = random_case(9);
  // Slot 13 (block 3) of KV head 0 points along head 0's query: its score dwarfs every other.
  for (int i = 0; i < kHeadDim; ++i) {
    planted.k[static_cast<std::size_t>((13 * kKvHeads + 0) * kHeadDim + i)] =
        4.0f * planted.q[static_cast<std::size_t>(i)];
  }
  const Case c = fill(planted);
  SparseOptions o;
  o.selector = SelectorKind::kQuest;
  o.topk = 2 * kBlock;
  SparseSelector s(tiny_config(), o);
  const std::vector<float> out = attend(c, &s);
  const auto picked = s.picked(0, 0);
  int count = 0;
  for (int t = 0; t < kTokens; ++t) count += picked[static_cast<std::size_t>(t)];
  EXPECT_EQ(count, 2 * kBlock);
  for (int t = 12; t < 16; ++t) EXPECT_EQ(picked[static_cast<std::size_t>(t)], 1) << t;
  for (int h = 0; h < kHeads; ++h) {  // whole blocks: a block is all in or all out
    const auto p = s.picked(0, h);
    for (int b = 0; b < kTokens / kBlock; ++b) {
      for (int t = b * kBlock + 1; t < (b + 1) * kBlock; ++t)
        EXPECT_EQ(p[static_cast<std::size_t>(t)], p[static_cast<std::size_t>(b * kBlock)]);
    }
  }
  // Every key left out scores no more than the highest bound left out, which is no more than the
  // lowest bound taken (the bound is an upper bound, and blocks go by bound).
  for (int h = 0; h < kHeads; ++h) {
    const int g = h / (kHeads / kKvHeads);
    const auto p = s.picked(0, h);
    float lowest_taken = INFINITY, highest_left = -INFINITY;
    double best_left_score = -INFINITY;
    for (int b = 0; b < kTokens / kBlock; ++b) {
      std::vector<float> mins(kHeadDim, INFINITY), maxs(kHeadDim, -INFINITY);
      for (int t = b * kBlock; t < (b + 1) * kBlock; ++t) {
        for (int i = 0; i < kHeadDim; ++i) {
          const float k = c.k[static_cast<std::size_t>((t * kKvHeads + g) * kHeadDim + i)];
          mins[static_cast<std::size_t>(i)] = std::min(mins[static_cast<std::size_t>(i)], k);
          maxs[static_cast<std::size_t>(i)] = std::max(maxs[static_cast<std::size_t>(i)], k);
        }
      }
      const float bound =
          quest_bound(c.q.data() + h * kHeadDim, mins.data(), maxs.data(), kHeadDim);
      if (p[static_cast<std::size_t>(b * kBlock)] != 0) {
        lowest_taken = std::min(lowest_taken, bound);
      } else {
        highest_left = std::max(highest_left, bound);
        for (int t = b * kBlock; t < (b + 1) * kBlock; ++t)
          best_left_score = std::max(best_left_score, score(c, h, t));
      }
    }
    EXPECT_LE(best_left_score, highest_left + 1e-5) << h;
    EXPECT_LE(highest_left, lowest_taken) << h;
  }
  EXPECT_EQ(s.stats().indexer_macs, double(kHeads * 2 * (kTokens / kBlock) * kHeadDim));
  EXPECT_EQ(out.size(), static_cast<std::size_t>(kHeads * kHeadDim));
}

TEST_P(SelectorOnCache, TheProxyRanksByItsChannelsOnly) {
  Case c = random_case(10);
  // On channels 0-1 slot 5 is the best match for head 0; on the others slot 9 is far better.
  for (int t = 0; t < kTokens; ++t) {
    for (int i = 0; i < kHeadDim; ++i)
      c.k[static_cast<std::size_t>((t * kKvHeads) * kHeadDim + i)] = 0.0f;
  }
  for (int i = 0; i < kHeadDim; ++i) c.q[static_cast<std::size_t>(i)] = 1.0f;
  c.k[static_cast<std::size_t>((5 * kKvHeads) * kHeadDim + 0)] = 1.0f;
  c.k[static_cast<std::size_t>((5 * kKvHeads) * kHeadDim + 1)] = 1.0f;
  for (int i = 2; i < kHeadDim; ++i)
    c.k[static_cast<std::size_t>((9 * kKvHeads) * kHeadDim + i)] = 3.0f;
  (void)fill(c);
  SparseOptions o;
  o.selector = SelectorKind::kProxy;
  o.topk = 1;
  o.proxy_dims = 2;
  SparseSelector proxy(tiny_config(), o, {{0, 1}, {0, 1}});
  attend(c, &proxy);
  EXPECT_EQ(proxy.picked(0, 0)[5], 1);
  EXPECT_EQ(proxy.picked(0, 0)[9], 0);
  o.selector = SelectorKind::kOracle;
  SparseSelector oracle(tiny_config(), o);
  attend(c, &oracle);
  EXPECT_EQ(oracle.picked(0, 0)[9], 1);  // the true best
  EXPECT_EQ(proxy.stats().indexer_macs, double(kHeads * kTokens * 2));
}

TEST_P(SelectorOnCache, SparqReadsTheQuerysLargestChannels) {
  Case c = random_case(12);
  // Head 0's query is large on channel 3 only; slot 9 is the one key large there, slot 5 is
  // larger on the small channels taken together.
  for (int t = 0; t < kTokens; ++t) {
    for (int i = 0; i < kHeadDim; ++i)
      c.k[static_cast<std::size_t>((t * kKvHeads) * kHeadDim + i)] = 0.0f;
  }
  for (int i = 0; i < kHeadDim; ++i) c.q[static_cast<std::size_t>(i)] = i == 3 ? 5.0f : 1.0f;
  c.k[static_cast<std::size_t>((9 * kKvHeads) * kHeadDim + 3)] = 1.0f;
  for (int i = 0; i < kHeadDim; ++i)
    if (i != 3) c.k[static_cast<std::size_t>((5 * kKvHeads) * kHeadDim + i)] = 1.0f;
  (void)fill(c);
  SparseOptions o;
  o.selector = SelectorKind::kSparq;
  o.topk = 1;
  o.proxy_dims = 1;
  SparseSelector sparq(tiny_config(), o);
  attend(c, &sparq);
  EXPECT_EQ(sparq.picked(0, 0)[9], 1);
  EXPECT_EQ(sparq.picked(0, 0)[5], 0);
  o.selector = SelectorKind::kOracle;
  SparseSelector oracle(tiny_config(), o);
  attend(c, &oracle);
  EXPECT_EQ(oracle.picked(0, 0)[5], 1);  // 7 channels of 1 beat one of 5
  // Each query head reads its own channel of every key: 4 heads x 24 keys x 1.
  EXPECT_EQ(sparq.stats().indexer_elems, double(kHeads * kTokens));
}

INSTANTIATE_TEST_SUITE_P(Formats, SelectorOnCache, ::testing::Values("fp32", "int8"));

TEST(SparseSelection, AQueryThatSkipsAHeadIsAnInternalError) {
  SparseOptions o;
  SparseSelector s(tiny_config(), o);
  s.begin_query(4);
  EXPECT_THROW(s.end_query(), InternalError);
}

}  // namespace
}  // namespace kvscope

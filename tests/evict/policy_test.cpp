// Eviction policies keep exactly the positions they should on hand-built attention patterns.
#include <gtest/gtest.h>

#include <numeric>

#include "engine/common/error.h"
#include "engine/evict/policy.h"

namespace kvscope {
namespace {

TokenStats stats_of(int n) {
  TokenStats t;
  for (int i = 0; i < n; ++i) t.positions.push_back(i);
  t.cumulative.assign(n, 1.0f);
  t.last_query.assign(n, 0.1f);
  t.window_votes.assign(n, 0.0f);
  return t;
}

std::vector<int> range(int lo, int hi) {
  std::vector<int> v(hi - lo);
  std::iota(v.begin(), v.end(), lo);
  return v;
}

EvictionConfig config(EvictionKind kind, int budget) {
  EvictionConfig c;
  c.kind = kind;
  c.budget = budget;
  return c;
}

TEST(EvictionPolicy, EveryPolicyIsIdentityWithinBudget) {
  for (auto kind :
       {EvictionKind::kNone, EvictionKind::kWindow, EvictionKind::kSinksWindow, EvictionKind::kH2O,
        EvictionKind::kSnapKV, EvictionKind::kTova, EvictionKind::kRandom}) {
    EXPECT_EQ(select_keep(config(kind, 20), stats_of(20), 0), range(0, 20));
    EXPECT_EQ(select_keep(config(kind, 64), stats_of(20), 0), range(0, 20));
  }
}

TEST(EvictionPolicy, WindowKeepsTheLastBudget) {
  EXPECT_EQ(select_keep(config(EvictionKind::kWindow, 5), stats_of(12), 0), range(7, 12));
}

TEST(EvictionPolicy, SinksKeepFirstSAndTheRecentWindow) {
  auto c = config(EvictionKind::kSinksWindow, 6);
  c.sinks = 2;
  EXPECT_EQ(select_keep(c, stats_of(12), 0), (std::vector<int>{0, 1, 8, 9, 10, 11}));
}

TEST(EvictionPolicy, H2OKeepsHeavyHittersPlusRecent) {
  TokenStats t = stats_of(12);
  t.cumulative[3] = 9.0f;
  t.cumulative[7] = 8.0f;
  t.cumulative[5] = 0.0f;
  auto c = config(EvictionKind::kH2O, 6);
  c.recent = 4;
  EXPECT_EQ(select_keep(c, t, 0), (std::vector<int>{3, 7, 8, 9, 10, 11}));
}

TEST(EvictionPolicy, SnapKVKeepsPooledVotesAndTheObservationWindow) {
  TokenStats t = stats_of(20);
  t.window_votes[4] = 3.0f;  // a peak: pooling spreads it to 3..5 with kernel 3
  auto c = config(EvictionKind::kSnapKV, 7);
  c.observation_window = 4;
  c.pool_kernel = 3;
  EXPECT_EQ(select_keep(c, t, 0), (std::vector<int>{3, 4, 5, 16, 17, 18, 19}));
}

TEST(EvictionPolicy, TovaDropsTheLowestCurrentAttention) {
  TokenStats t = stats_of(6);
  t.last_query = {0.3f, 0.05f, 0.2f, 0.01f, 0.4f, 0.0f};
  EXPECT_EQ(select_keep(config(EvictionKind::kTova, 4), t, 0), (std::vector<int>{0, 2, 4, 5}));
}

TEST(EvictionPolicy, RandomIsSeededAndKeepsTheNewest) {
  auto c = config(EvictionKind::kRandom, 5);
  auto a = select_keep(c, stats_of(30), 3);
  EXPECT_EQ(a, select_keep(c, stats_of(30), 3));
  EXPECT_EQ(a.size(), 5u);
  EXPECT_EQ(a.back(), 29);
  c.seed = 2;
  EXPECT_NE(a, select_keep(c, stats_of(30), 3));
}

TEST(EvictionPolicy, NamesRoundTripAndUnknownIsAnError) {
  for (const auto& name : eviction_kind_names()) {
    EXPECT_EQ(eviction_kind_name(parse_eviction_kind(name, "--evict")), name);
  }
  try {
    parse_eviction_kind("h20", "--evict");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--evict: expected an eviction policy"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace kvscope

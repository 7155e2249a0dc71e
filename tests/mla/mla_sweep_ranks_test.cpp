// The MLA rank ladder `kvscope eval mla-sweep` and the Quality panel share: eighths of the full
// rank, ascending, each once, ending at the full rank.
#include <gtest/gtest.h>

#include "engine/mla/mla_codec.h"

namespace kvscope {
namespace {

ModelConfig shape(int dim, int n_heads, int n_kv_heads) {
  ModelConfig c;
  c.dim = dim;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.n_layers = 2;
  return c;
}

TEST(MlaSweepRanks, EighthsOfTheFullRank) {
  const ModelConfig c = shape(64, 8, 4);  // stories260K: head_dim 8, kv_dim 32
  EXPECT_EQ(mla_full_rank(c, 0), 64);
  EXPECT_EQ(mla_sweep_ranks(c, 0), (std::vector<int>{8, 16, 24, 32, 40, 48, 56, 64}));
  // Mode B with 6 of 8 rotary dims: full rank 4 x 2 + 32 = 40.
  EXPECT_EQ(mla_sweep_ranks(c, 6), (std::vector<int>{5, 10, 15, 20, 25, 30, 35, 40}));
}

TEST(MlaSweepRanks, SmallFullRankListsEachRankOnceFromOne) {
  const ModelConfig c = shape(4, 2, 1);  // head_dim 2: full rank min(2 + 2, 4) = 4
  ASSERT_EQ(mla_full_rank(c, 0), 4);
  EXPECT_EQ(mla_sweep_ranks(c, 0), (std::vector<int>{1, 2, 3, 4}));
  for (int rope : {0, 2}) {
    const std::vector<int> ranks = mla_sweep_ranks(c, rope);
    ASSERT_FALSE(ranks.empty());
    EXPECT_GE(ranks.front(), 1);
    EXPECT_EQ(ranks.back(), mla_full_rank(c, rope));
    for (std::size_t i = 1; i < ranks.size(); ++i) EXPECT_LT(ranks[i - 1], ranks[i]);
  }
}

}  // namespace
}  // namespace kvscope

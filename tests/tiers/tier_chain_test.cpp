// TierChain: blocks the device evicts move down LRU tiers; a full tier passes its least recently
// used block to the next, the last drops it; a lookup refreshes the block where it is.
#include "engine/tiers/tier_chain.h"

#include <gtest/gtest.h>

#include "engine/common/error.h"

namespace kvscope {
namespace {

TEST(TierChain, FullTiersPassTheirLeastRecentBlockDownAndTheLastDropsIt) {
  TierChain chain({{"host", 2}, {"disk", 3}});
  for (std::uint64_t key = 1; key <= 6; ++key) chain.demote(key);
  // host keeps 6, 5; disk keeps 4, 3, 2; 1 fell off the end.
  EXPECT_EQ(chain.find(6), 0);
  EXPECT_EQ(chain.find(5), 0);
  EXPECT_EQ(chain.find(4), 1);
  EXPECT_EQ(chain.find(2), 1);
  EXPECT_FALSE(chain.find(1).has_value());
  EXPECT_EQ(chain.held(0), 2);
  EXPECT_EQ(chain.held(1), 3);
  EXPECT_EQ(chain.stats(0).written, 6);
  EXPECT_EQ(chain.stats(0).passed_down, 4);
  EXPECT_EQ(chain.stats(1).written, 4);
  EXPECT_EQ(chain.stats(1).passed_down, 1);
  EXPECT_EQ(chain.stats(0).hits, 2);
  EXPECT_EQ(chain.stats(1).hits, 2);
  EXPECT_EQ(chain.stats(1).peak_held, 3);
  EXPECT_NO_THROW(chain.check_invariants());
}

TEST(TierChain, ALookupMakesTheBlockMostRecentWhereItIs) {
  TierChain chain({{"host", 2}, {"disk", 1}});
  chain.demote(1);
  chain.demote(2);
  ASSERT_EQ(chain.find(1), 0);  // 1 is now host's most recent: 2 goes down next
  chain.demote(3);
  EXPECT_EQ(chain.find(1), 0);
  EXPECT_EQ(chain.find(2), 1);
  EXPECT_EQ(chain.find(3), 0);
  EXPECT_NO_THROW(chain.check_invariants());
}

TEST(TierChain, ABlockLivesInOneTierAndAZeroTierPassesEverythingThrough) {
  TierChain chain({{"host", 0}, {"disk", 4}});
  chain.demote(7);
  EXPECT_EQ(chain.find(7), 1);  // straight through host
  chain.demote(7);              // evicted from the device again: leaves disk, re-enters host...
  EXPECT_EQ(chain.find(7), 1);  // ...which passes it down at once
  EXPECT_EQ(chain.held(0), 0);
  EXPECT_EQ(chain.held(1), 1);
  EXPECT_EQ(chain.stats(1).written, 2);
  EXPECT_NO_THROW(chain.check_invariants());
  EXPECT_THROW(TierChain({}), Error);
  EXPECT_THROW(TierChain({{"host", -1}}), Error);
}

}  // namespace
}  // namespace kvscope

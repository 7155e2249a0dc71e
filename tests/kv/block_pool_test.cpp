// BlockPool on its own: FIFO reuse, first-fit runs, take, reference counts, and the bookkeeping
// bugs it refuses (double release, ids outside the pool) as internal errors.
#include <gtest/gtest.h>

#include <vector>

#include "engine/common/error.h"
#include "engine/kv/block_pool.h"

namespace kvscope {
namespace {

std::vector<int> ids(const std::vector<BlockId>& blocks) {
  std::vector<int> out;
  for (BlockId b : blocks) out.push_back(b.value);
  return out;
}

TEST(BlockPool, StartsWithEveryBlockFreeInIdOrder) {
  BlockPool pool(4);
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(ids(pool.free_queue()), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(pool.largest_free_run(), 4);
  EXPECT_NO_THROW(pool.check_invariants());
}

TEST(BlockPool, ReusesTheLeastRecentlyFreedBlockFirst) {
  BlockPool pool(4);
  const BlockId a = *pool.allocate(), b = *pool.allocate(), c = *pool.allocate();
  EXPECT_EQ(ids({a, b, c}), (std::vector<int>{0, 1, 2}));
  pool.release(b);
  pool.release(a);
  // Queue: 3 (never used), then 1, then 0 in the order they were freed.
  EXPECT_EQ(ids(pool.free_queue()), (std::vector<int>{3, 1, 0}));
  EXPECT_EQ(pool.peek_free()->value, 3);
  EXPECT_EQ(pool.allocate()->value, 3);
  EXPECT_EQ(pool.allocate()->value, 1);
  EXPECT_EQ(pool.allocate()->value, 0);
  EXPECT_FALSE(pool.allocate().has_value());
  EXPECT_FALSE(pool.peek_free().has_value());
  EXPECT_NO_THROW(pool.check_invariants());
}

TEST(BlockPool, RunsAreTakenFirstFitAndFragmentationIsMeasured) {
  BlockPool pool(8);
  std::vector<BlockId> all;
  for (int i = 0; i < 8; ++i) all.push_back(*pool.allocate());
  for (int i : {1, 2, 4, 5, 6}) pool.release(all[static_cast<std::size_t>(i)]);
  EXPECT_EQ(pool.largest_free_run(), 3);      // 4..6
  EXPECT_EQ(pool.allocate_run(2)->value, 1);  // the lowest run that fits, not the largest
  EXPECT_FALSE(pool.allocate_run(4).has_value());
  EXPECT_EQ(pool.allocate_run(3)->value, 4);
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_NO_THROW(pool.check_invariants());
}

TEST(BlockPool, TakeClaimsASpecificFreeBlockAndRefCountsHoldIt) {
  BlockPool pool(3);
  pool.take(BlockId(2));
  EXPECT_EQ(pool.ref_count(BlockId(2)), 1);
  EXPECT_EQ(ids(pool.free_queue()), (std::vector<int>{0, 1}));
  pool.add_ref(BlockId(2));
  pool.release(BlockId(2));
  EXPECT_FALSE(pool.is_free(BlockId(2)));  // one reference left
  pool.release(BlockId(2));
  EXPECT_TRUE(pool.is_free(BlockId(2)));
  EXPECT_EQ(ids(pool.free_queue()), (std::vector<int>{0, 1, 2}));
  EXPECT_NO_THROW(pool.check_invariants());
}

TEST(BlockPool, BookkeepingBugsAreInternalErrors) {
  BlockPool pool(2);
  const BlockId a = *pool.allocate();
  pool.release(a);
  EXPECT_THROW(pool.release(a), InternalError);  // double release
  EXPECT_THROW(pool.add_ref(a), InternalError);  // a reference on a free block
  const BlockId b = *pool.allocate();
  EXPECT_THROW(pool.take(b), InternalError);  // taking a block in use
  for (int bad : {-1, 2, 1 << 20}) {
    EXPECT_THROW(pool.release(BlockId(bad)), InternalError) << bad;
    EXPECT_THROW(pool.take(BlockId(bad)), InternalError) << bad;
    EXPECT_THROW(pool.add_ref(BlockId(bad)), InternalError) << bad;
  }
  try {
    pool.release(BlockId(7));
  } catch (const InternalError& e) {
    EXPECT_STREQ(e.what(),
                 "internal error (a bug in kvscope; please report it with the command that "
                 "triggered it): block pool: release(7): no such block (the pool has 2)");
  }
  EXPECT_NO_THROW(pool.check_invariants());  // refused calls changed nothing
}

TEST(BlockPool, SizeMustBePositive) {
  EXPECT_THROW(BlockPool(0), Error);
  EXPECT_THROW(BlockPool(-3), Error);
}

}  // namespace
}  // namespace kvscope

// Pool metrics on hand-built cache states: the worked examples of facts.md, reservation waste,
// external fragmentation, and the run summary.
#include <gtest/gtest.h>

#include "engine/analysis/pool_metrics.h"

namespace kvscope {
namespace {

KvCacheManager make_cache(AllocatorKind kind, int num_blocks, int max_seq_len) {
  KvLayout layout{2, 2, 4, 16, num_blocks, {}, {}};
  return KvCacheManager(layout, kind, max_seq_len, /*with_storage=*/false);
}

TEST(PoolMetrics, PagedFiveHundredTokens) {
  KvCacheManager cache = make_cache(AllocatorKind::kPaged, 100, 4096);
  ASSERT_TRUE(cache.add_sequence(SeqId(0)));
  ASSERT_TRUE(cache.append_slots(SeqId(0), 500));
  StepMetrics m;
  fill_pool_metrics(cache, m);
  EXPECT_EQ(m.blocks_used, 32);
  EXPECT_EQ(m.free_blocks, 68);
  EXPECT_EQ(m.slots_allocated, 512);
  EXPECT_EQ(m.slots_filled, 500);
  EXPECT_EQ(m.internal_frag_slots, 12);
  EXPECT_EQ(m.reservation_waste_slots, 0);
  EXPECT_DOUBLE_EQ(m.utilization(), 500.0 / 512.0);
  // bytes per token = 2 layers x (K + V) x 2 heads x 4 dims x 4 bytes = 128.
  EXPECT_EQ(m.kv_bytes_used, 512 * 128);
}

TEST(PoolMetrics, PagedThousandTokensWastesEight) {
  KvCacheManager cache = make_cache(AllocatorKind::kPaged, 100, 4096);
  cache.require_add_sequence(SeqId(7));
  cache.require_append_slots(SeqId(7), 1000);
  StepMetrics m;
  fill_pool_metrics(cache, m);
  EXPECT_EQ(m.blocks_used, 63);
  EXPECT_EQ(m.slots_allocated, 1008);
  EXPECT_EQ(m.internal_frag_slots, 8);
}

TEST(PoolMetrics, ContiguousReservationWaste) {
  KvCacheManager cache = make_cache(AllocatorKind::kContiguous, 200, 2048);
  ASSERT_TRUE(cache.add_sequence(SeqId(0)));
  ASSERT_TRUE(cache.append_slots(SeqId(0), 500));
  StepMetrics m;
  fill_pool_metrics(cache, m);
  EXPECT_EQ(m.blocks_used, 128);
  EXPECT_EQ(m.slots_allocated, 2048);
  EXPECT_EQ(m.slots_filled, 500);
  EXPECT_EQ(m.internal_frag_slots, 12);
  EXPECT_EQ(m.reservation_waste_slots, 1536);
  EXPECT_EQ(m.internal_frag_slots + m.reservation_waste_slots, 1548);  // 75.6% of the reservation
  EXPECT_NEAR(1.0 - m.utilization(), 0.756, 0.0005);
}

TEST(PoolMetrics, ExternalFragmentationAfterAFreeInTheMiddle) {
  KvCacheManager cache = make_cache(AllocatorKind::kContiguous, 10, 48);  // 3 blocks per request
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cache.add_sequence(SeqId(i)));  // blocks 0-2, 3-5, 6-8
  cache.free_sequence(SeqId(1));                                          // free 3-5 and 9
  StepMetrics m;
  fill_pool_metrics(cache, m);
  EXPECT_EQ(m.free_blocks, 4);
  EXPECT_EQ(m.largest_free_run, 3);
  EXPECT_DOUBLE_EQ(m.external_fragmentation(), 0.25);
  EXPECT_TRUE(cache.add_sequence(SeqId(5)));   // takes the run 3-5
  EXPECT_FALSE(cache.add_sequence(SeqId(6)));  // block 9 is free but a reservation needs 3 in a row
}

TEST(PoolMetrics, EmptyPoolIsFullyUtilizedByConvention) {
  KvCacheManager cache = make_cache(AllocatorKind::kPaged, 8, 128);
  StepMetrics m;
  fill_pool_metrics(cache, m);
  EXPECT_EQ(m.slots_allocated, 0);
  EXPECT_DOUBLE_EQ(m.utilization(), 1.0);
  EXPECT_EQ(m.largest_free_run, 8);
  EXPECT_DOUBLE_EQ(m.external_fragmentation(), 0.0);
}

TEST(RunSummary, AveragesOverSteps) {
  std::vector<StepMetrics> ms(4);
  for (int i = 0; i < 4; ++i) {
    ms[static_cast<std::size_t>(i)].step = i;
    ms[static_cast<std::size_t>(i)].blocks_used = 10 * i;
    ms[static_cast<std::size_t>(i)].requests_running = i;
    ms[static_cast<std::size_t>(i)].slots_allocated = i == 0 ? 0 : 100;
    ms[static_cast<std::size_t>(i)].slots_filled = i == 0 ? 0 : 50 + 10 * i;
    ms[static_cast<std::size_t>(i)].decode_tokens = i;
  }
  ms[3].preemptions = 5;
  ms[3].requests_finished = 2;
  const RunSummary s = summarize(ms);
  EXPECT_EQ(s.steps, 4);
  EXPECT_DOUBLE_EQ(s.mean_utilization, (0.6 + 0.7 + 0.8) / 3);  // the empty step is skipped
  EXPECT_DOUBLE_EQ(s.mean_blocks_used, 15.0);
  EXPECT_EQ(s.peak_blocks_used, 30);
  EXPECT_EQ(s.peak_running, 3);
  EXPECT_EQ(s.decode_tokens, 6);
  EXPECT_EQ(s.preemptions, 5);
  EXPECT_EQ(s.finished, 2);
}

}  // namespace
}  // namespace kvscope

// The demo data generator: deterministic, scrubbable in any order, and internally consistent
// (ref counts match the block tables, metrics match the pool state).
#include <gtest/gtest.h>

#include <vector>

#include "app/core/memory_shapes.h"
#include "app/demo/demo_source.h"

namespace kvscope::ui {
namespace {

TEST(DemoSource, DeterministicAndScrubbable) {
  DemoSource a, b;
  ASSERT_EQ(a.num_steps(), b.num_steps());
  PoolState forward, backward;
  a.state_at(200, forward);
  b.state_at(400, backward);
  b.state_at(200, backward);  // going back replays from a snapshot
  ASSERT_EQ(forward.blocks.size(), backward.blocks.size());
  for (std::size_t i = 0; i < forward.blocks.size(); ++i) {
    EXPECT_EQ(forward.blocks[i].owner, backward.blocks[i].owner);
    EXPECT_EQ(forward.blocks[i].filled, backward.blocks[i].filled);
  }
  EXPECT_EQ(a.all_metrics()[300].slots_filled, b.all_metrics()[300].slots_filled);
}

TEST(DemoSource, RefCountsMatchBlockTablesAndMetrics) {
  DemoSource src;
  PoolState pool;
  bool saw_shared = false, saw_cached = false, saw_preemption = false;
  for (int step = 0; step < src.num_steps(); step += 37) {
    src.state_at(step, pool);
    std::vector<int> refs(pool.blocks.size(), 0);
    std::int64_t tokens = 0;
    for (const RequestState& r : pool.requests) {
      for (int b : r.blocks) ++refs[b];
      tokens += r.num_tokens;
    }
    std::int64_t filled = 0;
    for (std::size_t i = 0; i < pool.blocks.size(); ++i) {
      EXPECT_EQ(pool.blocks[i].ref_count, refs[i]) << "block " << i << " at step " << step;
      if (refs[i] > 0) filled += pool.blocks[i].filled;
      saw_shared |= pool.blocks[i].status == BlockStatus::kShared;
      saw_cached |= pool.blocks[i].status == BlockStatus::kCachedFree;
    }
    const StepMetrics& m = src.all_metrics()[step];
    EXPECT_EQ(m.slots_filled, filled);
    EXPECT_LE(m.slots_filled, m.slots_allocated);
    EXPECT_LE(m.largest_free_run, m.free_blocks);
    saw_preemption |= m.preemptions > 0;
  }
  EXPECT_TRUE(saw_shared);
  EXPECT_TRUE(saw_cached);
  EXPECT_TRUE(saw_preemption);
}

TEST(MemoryShapes, PublishedFiguresFromFactsMd) {
  for (const KvShape& s : published_kv_shapes()) {
    if (s.name == "Llama-3-70B") {
      EXPECT_EQ(s.bytes_per_token(2.0), 327680.0);
    }
    if (s.name == "DeepSeek-V3 (MLA)") {
      EXPECT_EQ(s.bytes_per_token(2.0), 70272.0);
    }
    if (s.name == "Llama-3-8B") {
      EXPECT_EQ(s.bytes_per_token(2.0), 131072.0);
    }
  }
  EXPECT_EQ(published_kv_shapes().size(), 4u);
}

}  // namespace
}  // namespace kvscope::ui

// The demo data generator: deterministic, scrubbable in any order, and internally consistent
// (ref counts match the block tables, metrics match the pool state).
#include <gtest/gtest.h>

#include <limits>
#include <string>
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
  EXPECT_EQ(published_kv_shapes().size(), 7u);
}

// The architectures that bound or drop the cache, against their published configurations.
TEST(MemoryShapes, WindowSsmAndHybridBendTheCurve) {
  const std::vector<KvShape> shapes = published_kv_shapes();
  auto find = [&](const std::string& name) -> const KvShape& {
    for (const KvShape& s : shapes)
      if (s.name == name) return s;
    ADD_FAILURE() << "no shape " << name;
    return shapes.front();
  };
  const double inf = std::numeric_limits<double>::infinity();
  // Mistral-7B's 4,096-token window: 128 KiB per token until the window, then flat at 512 MiB.
  const KvShape& swa = find("Mistral-7B (window 4K)");
  EXPECT_EQ(swa.bytes_at(1024, 2.0), 1024 * 131072.0);
  EXPECT_EQ(swa.bytes_at(4096, 2.0), 512.0 * 1024 * 1024);
  EXPECT_EQ(swa.bytes_at(1 << 20, 2.0), 512.0 * 1024 * 1024);
  EXPECT_EQ(max_context_tokens(80e9, swa, 2.0), inf);
  EXPECT_EQ(max_context_tokens(256.0 * 1024 * 1024, swa, 2.0), 2048.0);
  // Mamba-2.8B: no KV cache, 64 x 5,120 x (16 + 4) state values in 16 bits (12.5 MiB) at any
  // context.
  const KvShape& ssm = find("Mamba-2.8B (SSM)");
  EXPECT_EQ(ssm.bytes_per_token(2.0), 0.0);
  EXPECT_EQ(ssm.bytes_at(1024, 2.0), 13107200.0);
  EXPECT_EQ(ssm.bytes_at(1 << 20, 0.5), 13107200.0) << "the KV format does not touch the state";
  EXPECT_EQ(max_context_tokens(80e9, ssm, 2.0), inf);
  EXPECT_EQ(max_context_tokens(1e6, ssm, 2.0), 0.0) << "not even the state fits";
  // Jamba: K/V in 4 of 32 layers, 16 KiB per token in 16 bits; at 256K tokens 4 GiB of KV, the
  // paper's Table 1 ("4GB"), beside 28 Mamba layers' state.
  const KvShape& hybrid = find("Jamba (1 attn layer in 8)");
  EXPECT_EQ(hybrid.bytes_per_token(2.0), 16384.0);
  EXPECT_EQ(hybrid.bytes_at(262144, 2.0) - hybrid.state_bytes(), 4.0 * 1024 * 1024 * 1024);
  EXPECT_EQ(hybrid.state_bytes(), 28.0 * 8192 * 20 * 2);
  EXPECT_EQ(max_context_tokens(80e9, hybrid, 2.0), (80e9 - hybrid.state_bytes()) / 16384.0);
  // A dense shape is what it was: the whole memory over its bytes per token.
  EXPECT_EQ(max_context_tokens(80e9, find("Llama-3-70B"), 2.0), 80e9 / 327680.0);

  // The allocator's Jamba (vLLM's hybrid layout): 80-token attention pages and padded state
  // pages of 327,680 bytes, which is also the formula's 8,192 x (16 + 4) values in 16 bits, so
  // the points sit on the formula's line wherever a context fills whole 80-token blocks, and at
  // most one block's attention bytes above it elsewhere.
  const std::vector<AllocatorPoint> pts = hybrid_allocator_points({1024, 1040, 262144});
  ASSERT_EQ(pts.size(), 3u);
  EXPECT_EQ(pts[0].bytes, (13 + 7) * 4 * 327680.0);     // ceil(1,024 / 80) = 13 blocks + 7 states
  EXPECT_EQ(pts[1].bytes, hybrid.bytes_at(1040, 2.0));  // 13 whole blocks
  EXPECT_GT(pts[0].bytes, hybrid.bytes_at(1024, 2.0));
  EXPECT_LE(pts[0].bytes - hybrid.bytes_at(1024, 2.0), 80 * 16384.0);
  EXPECT_LE(pts[2].bytes - hybrid.bytes_at(262144, 2.0), 80 * 16384.0);
}

}  // namespace
}  // namespace kvscope::ui

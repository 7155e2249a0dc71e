// scenarios/hybrid-swa.json: the figures its captions and docs/concepts/hybrid-models.md quote
// come out of the scenario as kvscope run and kvscope-ui run it (the bookkeeping model, the base
// and its all-full variant).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>

#include <unistd.h>

#include "engine/analysis/pool_metrics.h"
#include "engine/scenario/scenario.h"
#include "engine/sched/simulator.h"

namespace kvscope {
namespace {

std::unique_ptr<Simulator> run(const std::string& variant) {
  const Scenario s = parse_scenario(
      (std::filesystem::path(KVSCOPE_SOURCE_DIR) / "scenarios" / "hybrid-swa.json").string());
  const ScenarioModelLoad loaded = load_scenario_model(s, "", false, WeightFormat::kNative);
  EXPECT_EQ(loaded.weights, nullptr) << "the scenario is bookkeeping only";
  ResolvedRun r = resolve_scenario(s, variant, loaded.shape, nullptr);
  return std::make_unique<Simulator>(r.config, SimModel{loaded.shape, nullptr},
                                     std::move(r.requests));
}

TEST(HybridScenario, TheCaptionsNumbersHold) {
  auto hybrid = run("base");
  ASSERT_TRUE(hybrid->layer_groups().has_value());
  const LayerGroupPlan& plan = *hybrid->layer_groups();
  EXPECT_EQ(plan.group_size, 12);
  EXPECT_EQ(plan.block_bytes(), 384 * 1024);     // "a 16-token page in each of 12 layers, 384 KiB"
  EXPECT_EQ(hybrid->config().num_blocks, 5461);  // 2 GiB of them
  // "(Step 120:) sixteen requests hold 3,240 blocks: 3,096 full-attention blocks and 144
  // sliding-window ones, 9 a request."
  for (int s = 0; s <= 120; ++s) ASSERT_TRUE(hybrid->step());
  EXPECT_EQ(hybrid->timeline()->metrics(120).blocks_used, 3240);
  EXPECT_EQ(hybrid->timeline()->metrics(120).requests_running, 16);
  EXPECT_EQ(hybrid->cache().group_blocks(0), 3096);
  EXPECT_EQ(hybrid->cache().group_blocks(1), 144);
  // "1.19 GiB; with every layer full attention the same tokens take 6,192 blocks of this size,
  // 2.27 GiB: more than the pool."
  EXPECT_EQ(std::round(3240.0 * 393216 / (1 << 30) * 100), 119);
  EXPECT_EQ(std::round(2 * 3096.0 * 393216 / (1 << 30) * 100), 227);
  while (hybrid->step()) {
  }
  const RunSummary h = summarize(hybrid->timeline()->all_metrics());
  // "... finishing in 410 steps where the hybrid pool takes 261, with no preemption"
  EXPECT_EQ(h.steps, 261);
  EXPECT_EQ(h.preemptions, 0);

  auto full = run("all-full");
  EXPECT_EQ(full->layer_groups()->block_bytes(), 768 * 1024);
  EXPECT_EQ(full->config().num_blocks, 2730);
  while (full->step()) {
  }
  const RunSummary f = summarize(full->timeline()->all_metrics());
  // "preempts 33 times and recomputes 66,192 tokens"
  EXPECT_EQ(f.steps, 410);
  EXPECT_EQ(f.preemptions, 33);
  EXPECT_EQ(f.tokens_recomputed, 66192);
  EXPECT_EQ(f.finished, 16);
}

// The block map's view: each block's layer group comes from the run's BlockGrouped events, and
// a recording keeps them.
TEST(HybridScenario, TheReplayedPoolKnowsEachBlocksGroupAndARecordingKeepsIt) {
  auto hybrid = run("base");
  for (int s = 0; s <= 120; ++s) ASSERT_TRUE(hybrid->step());
  const PoolState p = hybrid->timeline()->state_at(120);
  ASSERT_EQ(p.groups.size(), 2u);
  EXPECT_EQ(p.groups[1].kind, 1);  // sliding
  EXPECT_EQ(p.groups[1].window, 128);
  long in_group[2] = {0, 0};
  for (const BlockState& b : p.blocks)
    if (b.owner >= 0) ++in_group[b.group];
  EXPECT_EQ(in_group[0], hybrid->cache().group_blocks(0));
  EXPECT_EQ(in_group[1], hybrid->cache().group_blocks(1));
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("kvscope_hybrid_" + std::to_string(::getpid()) + ".kvr"))
                               .string();
  hybrid->timeline()->save(path);
  const Timeline loaded = Timeline::load(path);
  std::filesystem::remove(path);
  const PoolState q = loaded.state_at(120);
  EXPECT_EQ(q.groups, p.groups);
  ASSERT_EQ(q.blocks.size(), p.blocks.size());
  for (std::size_t b = 0; b < p.blocks.size(); ++b) EXPECT_EQ(q.blocks[b].group, p.blocks[b].group);
}

}  // namespace
}  // namespace kvscope

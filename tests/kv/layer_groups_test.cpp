// Hybrid layer groups (engine/kv/layer_groups.h): the page-size and grouping rules of vLLM's
// hybrid KV cache manager worked by hand on published shapes (gpt-oss, Jamba, gpt-oss with
// EAGLE's extra full layer), the cache manager's per-group tables (a sliding window's blocks go
// back to the pool, a state is one block per sequence), and a scenario's hybrid run against its
// all-full variant.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/analysis/pool_metrics.h"
#include "engine/common/error.h"
#include "engine/kv/cache_manager.h"
#include "engine/kv/layer_groups.h"
#include "engine/scenario/scenario.h"
#include "engine/sched/simulator.h"

namespace kvscope {
namespace {

using K = LayerKind;

// gpt-oss-20b: 24 layers alternating a 128-token window and full attention; 8 KV heads of 64 in
// bf16: 2 x 8 x 64 x 2 = 2,048 bytes of K and V per token per layer.
TEST(LayerGroups, GptOssMakesTwoGroupsOfTwelveOnSixteenTokenPages) {
  const LayerGroupPlan p =
      plan_layer_groups({{K::kSliding, 12, 128, 0}, {K::kFull, 12, 0, 0}}, 2048, 16, "test");
  EXPECT_EQ(p.group_size, 12);
  ASSERT_EQ(p.groups.size(), 2u);
  EXPECT_EQ(p.groups[0].kind, K::kFull);  // full attention first: the engine's tables follow it
  EXPECT_EQ(p.groups[1].kind, K::kSliding);
  EXPECT_EQ(p.groups[1].window, 128);
  EXPECT_EQ(p.block_size, 16);
  EXPECT_FALSE(p.block_size_raised);
  EXPECT_EQ(p.page_bytes, 16 * 2048);
  EXPECT_EQ(p.block_bytes(), 12L * 16 * 2048);  // 384 KiB
  EXPECT_EQ(p.padded_layers, 0);
  // gpt-oss-120b: 36 layers, groups of 18.
  EXPECT_EQ(plan_layer_groups({{K::kSliding, 18, 128, 0}, {K::kFull, 18, 0, 0}}, 2048, 16, "t")
                .group_size,
            18);
}

// Jamba v0.1: attention in 4 of 32 layers (8 KV heads of 128: 4,096 bytes a token in bf16), a
// Mamba state in the other 28: conv 3 x 8,192 x 2 + SSM 8,192 x 16 x 2 = 311,296 bytes.
TEST(LayerGroups, JambasStateRaisesTheBlockToEightyTokens) {
  const LayerGroupPlan p =
      plan_layer_groups({{K::kFull, 4, 0, 0}, {K::kState, 28, 0, 311296}}, 4096, 16, "test");
  // 16 x ceil(311,296 / (16 x 4,096)) = 16 x 5 = 80 tokens; the page 80 x 4,096 = 327,680 bytes.
  EXPECT_TRUE(p.block_size_raised);
  EXPECT_EQ(p.block_size, 80);
  EXPECT_EQ(p.page_bytes, 327680);
  EXPECT_EQ(p.state_bytes, 311296);
  // 28 state layers are not under 1.5 x 4: groups of 4, one attention group and seven state ones.
  EXPECT_EQ(p.group_size, 4);
  ASSERT_EQ(p.groups.size(), 8u);
  EXPECT_EQ(p.groups[0].kind, K::kFull);
  for (std::size_t g = 1; g < p.groups.size(); ++g) EXPECT_EQ(p.groups[g].kind, K::kState);
  EXPECT_EQ(p.block_bytes(), 4L * 327680);
  ASSERT_EQ(p.notes.size(), 3u);
  EXPECT_NE(p.notes[1].find("padded from 311,296 to 327,680 bytes (5.0% padding)"),
            std::string::npos)
      << p.notes[1];
}

// gpt-oss-20b with an EAGLE draft layer: 12 sliding and 13 full. 13 is under 1.5 x 12, so the
// groups are of 13 and the sliding group carries a layer of padding (vLLM's own example).
TEST(LayerGroups, CountsWithinHalfOfEachOtherTakeTheLargerGroup) {
  const LayerGroupPlan p =
      plan_layer_groups({{K::kSliding, 12, 128, 0}, {K::kFull, 13, 0, 0}}, 2048, 16, "test");
  EXPECT_EQ(p.group_size, 13);
  ASSERT_EQ(p.groups.size(), 2u);
  EXPECT_EQ(p.groups[1].layers, 12);
  EXPECT_EQ(p.padded_layers, 1);
  // 8 and 24: groups of 8, three full ones.
  const LayerGroupPlan q =
      plan_layer_groups({{K::kSliding, 8, 64, 0}, {K::kFull, 24, 0, 0}}, 2048, 16, "test");
  EXPECT_EQ(q.group_size, 8);
  EXPECT_EQ(q.groups.size(), 4u);
}

std::string plan_error(const std::vector<LayerGroupSpec>& specs) {
  try {
    plan_layer_groups(specs, 2048, 16, "cache.layer_groups");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(LayerGroups, RefusesWhatVllmCannotLayOut) {
  EXPECT_EQ(plan_error({{K::kSliding, 12, 128, 0}}),
            "cache.layer_groups: expected a group of full-attention layers (every hybrid model "
            "vLLM serves has one), got none");
  EXPECT_EQ(plan_error({{K::kFull, 12, 0, 0}, {K::kSliding, 12, 0, 0}}),
            "cache.layer_groups[1].window: expected a window of at least 1 token, got 0");
  EXPECT_EQ(plan_error({{K::kFull, 0, 0, 0}}),
            "cache.layer_groups[0].layers: expected at least 1 layer, got 0");
  EXPECT_EQ(plan_error({}), "cache.layer_groups: expected at least one layer group, got none");
}

// The manager: block size 4, a window of 8 tokens and a state group beside the full one.
TEST(LayerGroups, ASlidingGroupGivesBackWhatLeftItsWindowAndAStateHoldsOneBlock) {
  KvLayout layout{1, 1, 4, 4, 64, {}, {}};
  KvCacheManager m(layout, AllocatorKind::kPaged, 0, /*with_storage=*/false);
  m.set_layer_groups({{K::kFull, 0, 1}, {K::kSliding, 8, 1}, {K::kState, 0, 1}});
  ASSERT_TRUE(m.add_sequence(SeqId(0)));
  // A 20-token prompt: 5 blocks in each attention group, 1 state block.
  EXPECT_EQ(m.blocks_needed(SeqId(0), 20), 11);
  ASSERT_TRUE(m.append_slots(SeqId(0), 20));
  EXPECT_EQ(m.group_blocks(0), 5);
  EXPECT_EQ(m.group_blocks(1), 5);
  EXPECT_EQ(m.group_blocks(2), 1);
  EXPECT_EQ(m.pool().num_free(), 64 - 11);
  m.check_invariants();
  // The next token: the window keeps tokens from 20 - 8 + 1 = 13 on, so blocks 0-2 (tokens 0-11)
  // go back first; then each attention group takes its block 5: 2 new less 3 back, none needed.
  EXPECT_EQ(m.blocks_needed(SeqId(0), 1), 0);
  const std::vector<int> before = m.group_table(1, SeqId(0));
  ASSERT_TRUE(m.append_slots(SeqId(0), 1));
  const std::vector<int> after = m.group_table(1, SeqId(0));
  ASSERT_EQ(after.size(), 6u);
  EXPECT_EQ(after[0], -1);
  EXPECT_EQ(after[1], -1);
  EXPECT_EQ(after[2], -1);
  EXPECT_EQ(after[3], before[3]);
  EXPECT_EQ(after[4], before[4]);
  EXPECT_GE(after[5], 0);
  EXPECT_EQ(m.group_blocks(0), 6);
  EXPECT_EQ(m.group_blocks(1), 3);
  EXPECT_EQ(m.group_blocks(2), 1);
  EXPECT_EQ(m.pool().num_free(), 64 - 10);
  m.check_invariants();
  EXPECT_EQ(m.blocks_to_hold(400), 100 + (m.blocks_for(8) + 1) + 1);
  m.free_sequence(SeqId(0));
  EXPECT_EQ(m.pool().num_free(), 64);
  m.check_invariants();
}

TEST(LayerGroups, AHybridRunRefusesWhatItDoesNotModel) {
  const Scenario s = parse_scenario(std::string(KVSCOPE_SOURCE_DIR) + "/scenarios/hybrid-swa.json");
  const ScenarioModelLoad loaded = load_scenario_model(s, "", true, WeightFormat::kF32);
  const auto refusal = [&](const std::function<void(SimConfig&)>& edit) {
    ResolvedRun run = resolve_scenario(s, "base", loaded.shape, nullptr);
    edit(run.config);
    try {
      Simulator sim(run.config, SimModel{loaded.shape, nullptr}, std::move(run.requests));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(refusal([](SimConfig&) {}), "(no error)");
  EXPECT_EQ(refusal([](SimConfig& c) { c.prefix_caching = true; }),
            "cache.layer_groups: expected the paged allocator, recompute preemption and none of "
            "prefix caching beside hybrid layer groups (not modelled), got prefix caching");
  EXPECT_EQ(refusal([](SimConfig& c) { c.layer_groups.pop_back(); }),
            "cache.layer_groups: expected groups whose layers add up to the model's 24, got 12 "
            "layers");
}

// A Jamba-like model through a whole scenario run: the resolver raises the block to 80 tokens,
// every sequence holds one block in each of the seven state groups while it runs, and the
// invariants hold at every step, through preemptions in a pool too small for all of them.
TEST(LayerGroups, AStateModelRunsToTheEndWithItsInvariants) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("kvscope_jamba_" + std::to_string(::getpid()) + ".json"))
                               .string();
  {
    std::ofstream f(path);
    f << R"({"format_version": 1, "title": "jamba-like",
      "model": {"synthetic": "llama-3-8b,layers=32", "bookkeeping": true},
      "cache": {"block_size": 16, "num_blocks": 120, "kv_dtype": "fp16",
        "layer_groups": [{"type": "full", "layers": 4},
                         {"type": "state", "layers": 28, "state_bytes": 311296}]},
      "workload": {"generators": [{"type": "random", "seed": 3, "count": 12,
        "arrival": {"start": 0, "every": 2}, "prompt_tokens": 900, "max_new_tokens": 600}]}})";
  }
  const Scenario s = parse_scenario(path);
  std::filesystem::remove(path);
  const ScenarioModelLoad loaded = load_scenario_model(s, "", true, WeightFormat::kF32);
  ResolvedRun run = resolve_scenario(s, "base", loaded.shape, nullptr);
  EXPECT_EQ(run.config.block_size, 80);
  Simulator sim(run.config, SimModel{loaded.shape, nullptr}, std::move(run.requests));
  ASSERT_EQ(sim.cache().num_groups(), 8);
  int steps = 0;
  while (sim.step()) {
    sim.check_invariants();
    long running = 0;
    for (SeqId id : sim.cache().sequences())
      running += sim.cache().table(id).num_tokens > 0 ? 1 : 0;
    for (int g = 1; g < 8; ++g) ASSERT_EQ(sim.cache().group_blocks(g), running) << "step " << steps;
    ASSERT_LT(++steps, 10000);
  }
  const RunSummary r = summarize(sim.timeline()->all_metrics());
  EXPECT_EQ(r.finished, 12);
  EXPECT_GT(r.preemptions, 0);  // 120 blocks: 12 x (19 + 7) do not fit at once
}

// The sliding-window scenario in a pool too small for its sixteen requests: preempted
// sequences give every group's blocks back, and the invariants hold at every step.
TEST(LayerGroups, ASlidingWindowRunSurvivesPreemption) {
  const Scenario s = parse_scenario(std::string(KVSCOPE_SOURCE_DIR) + "/scenarios/hybrid-swa.json");
  const ScenarioModelLoad loaded = load_scenario_model(s, "", true, WeightFormat::kF32);
  ResolvedRun run = resolve_scenario(s, "base", loaded.shape, nullptr);
  run.config.num_blocks = 1200;  // about six requests' worth
  Simulator sim(run.config, SimModel{loaded.shape, nullptr}, std::move(run.requests));
  int steps = 0;
  while (sim.step()) {
    sim.check_invariants();
    ASSERT_LT(++steps, 20000);
  }
  const RunSummary r = summarize(sim.timeline()->all_metrics());
  EXPECT_EQ(r.finished, 16);
  EXPECT_GT(r.preemptions, 0);
  EXPECT_EQ(sim.cache().pool().num_free(), 1200);  // everything back at the end
}

TEST(LayerGroups, TheScenariosHybridRunHoldsAboutHalfItsAllFullVariantsBytes) {
  const Scenario s = parse_scenario(std::string(KVSCOPE_SOURCE_DIR) + "/scenarios/hybrid-swa.json");
  const ScenarioModelLoad loaded = load_scenario_model(s, "", true, WeightFormat::kF32);
  double peak[2] = {0, 0};
  int steps[2] = {0, 0};
  for (int v = 0; v < 2; ++v) {
    ResolvedRun run = resolve_scenario(s, v == 0 ? "base" : "all-full", loaded.shape, nullptr);
    run.config.num_blocks = 40000;  // room for every request at once in both: no preemption
    Simulator sim(run.config, SimModel{loaded.shape, nullptr}, std::move(run.requests));
    long most = 0;
    while (sim.step()) {
      most = std::max<long>(most, sim.cache().pool().num_used());
      ++steps[v];
    }
    ASSERT_TRUE(sim.layer_groups().has_value());
    peak[v] = static_cast<double>(most) * static_cast<double>(sim.layer_groups()->block_bytes());
  }
  EXPECT_EQ(steps[0], steps[1]);  // the same schedule: only the blocks differ
  // Half the layers keep every token; the other half at most the window's 127 tokens and the
  // blocks they straddle, of each request's 3,199: the ratio is 0.5 plus at most half the
  // window's share (with two blocks of slack).
  const double ratio = peak[0] / peak[1];
  EXPECT_GT(ratio, 0.5);
  EXPECT_LT(ratio, 0.5 + 0.5 * (128.0 + 2 * 16.0) / 3199.0) << ratio;
}

}  // namespace
}  // namespace kvscope

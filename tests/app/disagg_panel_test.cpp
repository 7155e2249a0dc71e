// The Prefill/decode panel: on scenarios/disaggregated.json it shows the runs kvscope disagg
// computes (the same summaries as a direct DisaggRun with the scenario's section), the pools it
// draws are pools_at the time shown, a link choice re-runs it with that link, and a scenario
// without a disaggregation section runs with the defaults and says so. A recording has nothing to
// re-run.
#include <gtest/gtest.h>
#include <imgui.h>

#include <string>

#include "app/core/headless.h"
#include "app/core/run_session.h"
#include "app/panels/disagg_panel.h"
#include "engine/scenario/scenario.h"
#include "tests/app/ui_test_support.h"

namespace kvscope::ui {
namespace {

std::string scenario(const char* name) {
  return std::string(KVSCOPE_SOURCE_DIR) + "/scenarios/" + name;
}

void frame(DisaggPanel& panel, AppState& state, const std::string& what) {
  test::draw_panel_alone(panel, state, "serving", ImVec2(1280, 720), what);
}

// Draws until the panel's runs are in and drawn.
const DisaggView* ran(DisaggPanel& panel, AppState& state, const std::string& what) {
  for (int f = 0; f < 6; ++f) {
    frame(panel, state, what);
    panel.wait_for_run();
    if (panel.shown() != nullptr && !panel.busy()) {
      frame(panel, state, what + " (drawn)");
      return panel.shown();
    }
  }
  return panel.shown();
}

DisaggReport direct(const std::string& path, const DisaggOptions* link_from, Serving serving) {
  const Scenario s = parse_scenario(path);
  const ScenarioModelLoad m = load_scenario_model(s, "", false, WeightFormat::kNative);
  const ResolvedRun r = resolve_scenario(s, "base", m.shape, m.tokenizer.get());
  DisaggOptions o = r.disaggregation.value_or(DisaggOptions{});
  if (link_from != nullptr) o.link = link_from->link;
  DisaggRun run(r.config, o, serving, SimModel{m.shape, m.weights}, r.requests);
  run.run();
  return run.report();
}

TEST(DisaggPanel, ShowsWhatKvscopeDisaggComputes) {
  HeadlessImGui imgui(ImVec2(1280, 720));
  const std::string path = scenario("disaggregated.json");
  std::unique_ptr<RunSession> session = RunSession::open(path);
  session->wait();
  AppState state(session->make_source());
  DisaggPanel panel;
  const DisaggView* v = ran(panel, state, "base");
  ASSERT_NE(v, nullptr);
  ASSERT_TRUE(v->error.empty()) << v->error;
  EXPECT_TRUE(v->from_scenario);
  const DisaggSummary want = summarize(direct(path, nullptr, Serving::kDisaggregated));
  EXPECT_EQ(v->di.ttft_mean, want.ttft_mean);
  EXPECT_EQ(v->di.tpot_p90, want.tpot_p90);
  EXPECT_EQ(v->co.ttft_mean, summarize(direct(path, nullptr, Serving::kColocated)).ttft_mean);

  // The pools drawn are the report's at the time shown; mid-run something is on the link.
  ASSERT_TRUE(panel.drawn_pools().has_value());
  const PoolsAt at = pools_at(v->disaggregated, panel.time());
  EXPECT_EQ(panel.drawn_pools()->blocks_used, at.blocks_used);
  EXPECT_EQ(panel.drawn_pools()->blocks_in_flight, at.blocks_in_flight);
  // Just before the last transfer is done: its prompt's prefill has ended, its blocks are held.
  double busy_time = 0;
  for (const TransferEvent& e : v->disaggregated.transfers)
    if (e.done) busy_time = e.time - 1e-7;
  panel.set_time(busy_time);
  frame(panel, state, "a transfer under way");
  EXPECT_GE(panel.drawn_pools()->transfers, 1);
  EXPECT_GT(panel.drawn_pools()->blocks_held[0], 0);
  // Each GPU's block map: as many blocks used and held as its pool has at that time.
  for (int i = 0; i < 2; ++i) {
    const std::vector<BlockOwner>& map = panel.drawn_map(i);
    ASSERT_EQ(static_cast<int>(map.size()),
              v->disaggregated.instances[static_cast<std::size_t>(i)].num_blocks);
    int used = 0, held = 0;
    for (const BlockOwner& b : map) {
      used += b.use != BlockUse::kFree ? 1 : 0;
      held += b.use == BlockUse::kHeld ? 1 : 0;
    }
    EXPECT_EQ(used, panel.drawn_pools()->blocks_used[static_cast<std::size_t>(i)]) << "GPU " << i;
    EXPECT_EQ(held, panel.drawn_pools()->blocks_held[static_cast<std::size_t>(i)]) << "GPU " << i;
  }

  // Another link re-runs it with that link (the view shown so far goes).
  const double rdma_transfer = v->di.transfer;
  v = nullptr;
  panel.set_link("ib100");
  const DisaggView* slow = ran(panel, state, "ib100");
  ASSERT_NE(slow, nullptr);
  EXPECT_EQ(slow->options.link.name, "ib100");
  DisaggOptions ib;
  ib.link = parse_link("ib100", "test");
  EXPECT_EQ(slow->di.transfer, summarize(direct(path, &ib, Serving::kDisaggregated)).transfer);
  EXPECT_GT(slow->di.transfer, rdma_transfer);
}

TEST(DisaggPanel, AScenarioWithoutASectionRunsTheDefaults) {
  HeadlessImGui imgui(ImVec2(1280, 720));
  std::unique_ptr<RunSession> session = RunSession::open(scenario("minimal.json"));
  session->wait();
  AppState state(session->make_source());
  DisaggPanel panel;
  const DisaggView* v = ran(panel, state, "minimal");
  ASSERT_NE(v, nullptr);
  ASSERT_TRUE(v->error.empty()) << v->error;
  EXPECT_FALSE(v->from_scenario);
  EXPECT_EQ(v->options.link.name, "rdma400");
  EXPECT_GT(v->disaggregated.transfer_bytes, 0);
  EXPECT_EQ(v->co.finished, static_cast<int>(v->colocated.requests.size()));
}

}  // namespace
}  // namespace kvscope::ui

// Headless UI test: every registered panel drawn for 120 frames with no window or renderer on a
// real run of scenarios/minimal.json (the Simulator computing on its worker thread meanwhile),
// mouse sweeping over it, playback and presenter mode on; no ImGui errors, geometry in every panel.
#include <gtest/gtest.h>
#include <imgui.h>
#include <imgui_internal.h>

#include <cfloat>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "app/core/headless.h"
#include "app/core/run_session.h"
#include "app/core/shell.h"
#include "app/core/timeline_source.h"
#include "app/demo/demo_source.h"
#include "app/panels/block_map_panel.h"
#include "app/panels/registry.h"
#include "engine/evict/token_evictor.h"
#include "engine/model/locate.h"
#include "engine/sched/simulator.h"
#include "tests/app/ui_test_support.h"

namespace kvscope::ui {
namespace {

using test::panel_vertices;
using test::run_checked_frame;

std::string minimal_scenario() {
  return std::string(KVSCOPE_SOURCE_DIR) + "/scenarios/minimal.json";
}

// A run with one step and nothing in it: the smallest input the panels must survive.
class EmptySource final : public DataSource {
 public:
  EmptySource() { metrics_.resize(1); }
  const TimelineHeader& header() const override { return header_; }
  int num_steps() const override { return 1; }
  std::span<const StepMetrics> all_metrics() const override { return metrics_; }
  void state_at(int, PoolState& out) const override { out = PoolState{}; }
  bool is_demo() const override { return false; }
  std::string describe() const override { return "empty"; }

 private:
  TimelineHeader header_;
  std::vector<StepMetrics> metrics_;
};

// Every panel is drawn in every one of the 120 frames (all shown at once, beyond any workspace),
// on a prefix-caching scenario so the prefix tree, the attention capture, the quality sweep and the
// compare variant all have real work in flight while the frames run.
void draw_every_panel_for_120_frames(const std::string& scenario) {
  HeadlessImGui imgui(ImVec2(1600, 1000));
  UiShell shell(RunSession::open(scenario), imgui.fonts());
  // A run still computing opens in follow-live mode; one that finished first opens at step 0.
  if (!shell.state().playing) {
    EXPECT_FALSE(shell.session()->is_running());
  }
  EXPECT_EQ(shell.state().follow_live, shell.state().playing);
  ASSERT_EQ(shell.panels().size(), make_panels().size());
  ImGuiIO& io = ImGui::GetIO();
  std::map<std::string, int> frames_with_geometry;
  for (int frame = 0; frame < 120; ++frame) {
    for (auto& p : shell.panels()) p->visible = true;
    // Sweep the mouse over a grid so every panel's hover and tooltip paths run.
    io.MousePos = ImVec2(static_cast<float>((frame * 137) % 1600),
                         static_cast<float>(60 + (frame * 71) % 940));
    io.MouseDown[0] = frame % 17 == 5;
    if (frame == 10) shell.state().set_step(0);  // scrub back (still playing) while it may compute
    if (frame == 30) shell.set_workspace(frame / 30);
    if (frame == 60) shell.set_presenter(true);
    if (frame == 90) shell.toggle_help();
    run_checked_frame([&] { shell.frame(1.0 / 60.0); },
                      "drawing the shell, frame " + std::to_string(frame));
    for (const auto& panel : shell.panels())
      if (panel_vertices(panel->title()) > 0) ++frames_with_geometry[panel->title()];
  }
  // Playback from the start runs forward. The sweep's clicks may have paused it, scrubbed it or
  // (if the run finished before frame 10) left it stopped at step 0, so press Play from step 0
  // with the mouse out of the way; the worker may still be computing on a loaded machine, so
  // keep drawing (at most 30 s) until a step past the first is shown.
  io.MouseDown[0] = false;
  io.MousePos = ImVec2(-FLT_MAX, -FLT_MAX);
  shell.state().set_step(0);
  if (shell.state().playing) shell.state().toggle_play();
  shell.state().toggle_play();
  ASSERT_TRUE(shell.state().playing);
  for (int extra = 0; extra < 3000 && shell.state().step() == 0; ++extra) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "drawing the shell while waiting");
  }
  EXPECT_GT(shell.state().step(), 0) << "playback should have advanced";
  shell.session()->wait();
  EXPECT_FALSE(shell.session()->take_error().has_value());
  EXPECT_FALSE(shell.state().header().title.empty());
  for (const auto& panel : shell.panels()) {
    EXPECT_EQ(frames_with_geometry[panel->title()], 120)
        << panel->title() << " drew nothing in some frames";
  }
  const ImDrawData* dd = ImGui::GetDrawData();
  ASSERT_NE(dd, nullptr);
  EXPECT_GT(dd->TotalVtxCount, 1000);
}

TEST(UiHeadless, EveryPanelDrawsGeometryFor120Frames) {
  draw_every_panel_for_120_frames(minimal_scenario());
}

TEST(UiHeadless, EveryPanelDrawsGeometryFor120FramesWithPrefixCaching) {
  draw_every_panel_for_120_frames(std::string(KVSCOPE_SOURCE_DIR) +
                                  "/scenarios/shared-system-prompt.json");
}

// Presenter captions drive the view: reaching one (PageDown, --caption) sets its workspace and the
// attention panel's layer, head or sink grid, paused at its step; playing stops at a caption that
// pauses instead of running on past its moment.
TEST(UiHeadless, CaptionsDriveTheViewAndPauseTheRun) {
  const std::string path = testing::TempDir() + "caption-views.json";
  {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(minimal_scenario()));
    j.erase("$schema");
    j["captions"] = nlohmann::json::parse(R"([
      {"step": 0, "caption": "start"},
      {"step": 6, "caption": "the pool", "view": {"workspace": "prefix", "pause": true}},
      {"step": 20, "caption": "a head", "view": {"workspace": "attention", "layer": 3, "head": 5}},
      {"step": 30, "caption": "the grid", "view": {"sink_grid": true}}])");
    std::ofstream(path) << j.dump(2);
  }
  HeadlessImGui imgui(ImVec2(1600, 1000));
  std::unique_ptr<RunSession> run = RunSession::open(path);
  run->wait();
  UiShell shell(std::move(run), imgui.fonts());
  ASSERT_EQ(shell.num_captions(), 4);
  // Playing from 0 stops at step 6, the caption that pauses.
  shell.state().set_step(0);
  shell.state().playing = true;
  for (int f = 0; f < 200 && shell.state().playing; ++f)
    run_checked_frame([&] { shell.frame(1.0 / 30.0); }, "playing");
  EXPECT_FALSE(shell.state().playing);
  EXPECT_EQ(shell.state().step(), 6);
  // Resuming goes past it.
  shell.state().toggle_play();
  for (int f = 0; f < 10; ++f) run_checked_frame([&] { shell.frame(1.0 / 30.0); }, "resumed");
  EXPECT_GT(shell.state().step(), 6);
  // Going to caption 3 (index 2): the Attention & quality workspace, layer 3 head 5.
  ASSERT_TRUE(shell.go_to_caption(2));
  EXPECT_EQ(shell.state().step(), 20);
  EXPECT_FALSE(shell.state().playing);
  EXPECT_EQ(std::string(UiShell::workspace_name(shell.workspace())), "Attention & quality");
  ASSERT_TRUE(shell.state().attention_focus.has_value());
  EXPECT_EQ(shell.state().attention_focus->layer, 3);
  EXPECT_EQ(shell.state().attention_focus->head, 5);
  run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "the attention panel takes the focus");
  EXPECT_FALSE(shell.state().attention_focus.has_value()) << "the panel consumed it";
  EXPECT_FALSE(shell.go_to_caption(4));  // no such caption
}

// At the default window size (1600x1000) every workspace shows its full layout (smaller windows
// leave panels out: tests/app/ui_legibility_test.cpp), and together they show every panel.
TEST(UiHeadless, WorkspacesShowTheirPanels) {
  HeadlessImGui imgui(ImVec2(1600, 1000));
  std::unique_ptr<RunSession> run = RunSession::open(minimal_scenario(), /*bookkeeping=*/true);
  run->wait();
  UiShell shell(std::move(run), imgui.fonts());
  ASSERT_GE(UiShell::num_workspaces(), 4);
  for (int w = 0; w < UiShell::num_workspaces(); ++w) {
    shell.set_workspace(w);
    int shown = 0;
    for (const auto& p : shell.panels()) shown += p->visible ? 1 : 0;
    EXPECT_GE(shown, 2) << UiShell::workspace_name(w);
    for (int f = 0; f < 3; ++f)
      run_checked_frame([&] { shell.frame(1.0 / 60.0); }, UiShell::workspace_name(w));
  }
  // Together the workspaces show every panel.
  std::map<std::string, bool> seen;
  for (int w = 0; w < UiShell::num_workspaces(); ++w) {
    shell.set_workspace(w);
    for (const auto& p : shell.panels())
      if (p->visible) seen[p->title()] = true;
  }
  for (const auto& p : shell.panels()) EXPECT_TRUE(seen[p->title()]) << p->title();
}

TEST(UiHeadless, EachPanelAloneSurvivesTinyAndEmptyInputs) {
  HeadlessImGui imgui(ImVec2(320, 240));
  AppState empty(std::make_unique<EmptySource>());
  std::unique_ptr<RunSession> run = RunSession::open(minimal_scenario(), /*bookkeeping=*/true);
  run->wait();
  AppState real(run->make_source());
  real.set_step(real.num_steps() / 2);
  for (const auto& panel : make_panels()) {
    for (AppState* state : {&empty, &real}) {
      for (int frame = 0; frame < 5; ++frame) {
        ImGui::SetNextWindowSize(ImVec2(frame < 3 ? 90.0f : 300.0f, frame < 3 ? 60.0f : 200.0f));
        run_checked_frame(
            [&] {
              ImGui::Begin(panel->title());
              panel->draw(*state);
              ImGui::End();
            },
            std::string("drawing ") + panel->title() + " alone");
      }
    }
  }
}

TEST(UiHeadless, OpenKeepsTheRunOnErrorsAndRestartReruns) {
  HeadlessImGui imgui(ImVec2(1200, 800));
  UiShell shell(RunSession::open(minimal_scenario()), imgui.fonts());
  run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "first frame");
  const std::string title = shell.state().header().title;
  EXPECT_FALSE(shell.open("/nonexistent/scenario.json"));  // error modal, run kept
  EXPECT_EQ(shell.state().header().title, title);
  EXPECT_EQ(shell.session()->path(), minimal_scenario());
  for (int f = 0; f < 3; ++f) run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "error modal");
  shell.restart();  // stops the running worker first, then runs again from step 0
  shell.session()->wait();
  const int steps = shell.state().num_steps();
  EXPECT_GT(steps, 100);
  const std::string kvr = testing::TempDir() + "ui_open_test.kvr";
  shell.session()->timeline()->save(kvr);
  ASSERT_TRUE(shell.open(kvr));
  EXPECT_FALSE(shell.state().is_live());
  EXPECT_EQ(shell.state().num_steps(), steps);
  for (int f = 0; f < 5; ++f) run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "recording");
}

// Token eviction in the Simulator (built in C++: scenario files gain the fields later): the
// source's per-token liveness equals each running request's evictor at every step, and every
// panel draws the run (evicted tokens struck through in the text panel).
TEST(UiHeadless, TokenEvictionRunShowsEvictedTokens) {
  const LoadedModel m = load_model("", "");
  static const char* kPrompts[] = {"Once upon a time", "Lily had a red ball", "The cat sat",
                                   "Tom and his dog went to the park"};
  std::vector<SimRequest> requests;
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < 4; ++i) {
    SimRequest r;
    r.arrival_step = i;
    r.prompt_tokens = m.tokenizer->encode(kPrompts[i], /*bos=*/true, /*eos=*/false);
    r.max_new_tokens = 40;
    prompts.push_back(r.prompt_tokens);
    requests.push_back(r);
  }
  SimConfig c;
  c.title = "token eviction (h2o, budget 12)";
  c.block_size = 4;
  c.num_blocks = 16;
  c.token_eviction.policy.kind = EvictionKind::kH2O;
  c.token_eviction.policy.budget = 12;
  c.token_eviction.compaction = CompactionPolicy::kHalfEmpty;
  Simulator sim(c, SimModel{m.model->config(), m.model}, requests);
  TimelineSource check(sim.timeline(), "test");
  int compared = 0;
  while (sim.step()) {
    const int step = sim.current_step() - 1;
    for (int id = 0; id < sim.num_requests(); ++id) {
      const TokenEvictor* ev = sim.token_evictor(id);
      if (ev == nullptr) continue;
      std::vector<std::uint8_t> want(static_cast<std::size_t>(ev->next_token()), 0);
      for (std::size_t s = 0; s < ev->slot_live().size(); ++s)
        if (ev->slot_live()[s]) want[static_cast<std::size_t>(ev->slot_tokens()[s])] = 1;
      std::vector<std::uint8_t> got = check.slot_live(id, step);
      got.resize(want.size(), 1);  // positions past the last eviction are live
      ASSERT_EQ(got, want) << "request " << id << " step " << step;
      compared += ev->counters().tokens_evicted > 0;
    }
  }
  EXPECT_GT(compared, 10) << "requests must actually evict while running";
  for (int id = 0; id < sim.num_requests(); ++id)
    EXPECT_EQ(sim.request(id).phase, RequestPhase::kFinished) << sim.request(id).reject_reason;

  auto source = std::make_unique<TimelineSource>(sim.timeline(), "token eviction test");
  source->set_text_info(m.tokenizer, prompts);
  HeadlessImGui imgui(ImVec2(1400, 900));
  UiShell shell(std::move(source), imgui.fonts());
  shell.state().set_step(shell.state().num_steps() / 2);
  ImGuiIO& io = ImGui::GetIO();
  for (int frame = 0; frame < 30; ++frame) {
    for (auto& p : shell.panels()) p->visible = true;
    io.MousePos = ImVec2(static_cast<float>((frame * 137) % 1400),
                         static_cast<float>(60 + (frame * 71) % 840));
    run_checked_frame([&] { shell.frame(1.0 / 60.0); },
                      "token eviction run, frame " + std::to_string(frame));
  }
  EXPECT_GT(panel_vertices("Text"), 0);
}

// 100,000 blocks: synthetic pool states (no scenario of that size runs in a unit test).
TEST(UiHeadless, BlockMapAggregatesWhenCellsFallBelowAPixel) {
  HeadlessImGui imgui(ImVec2(800, 600));
  AppState state(std::make_unique<DemoSource>(DemoConfig{100000, 16, 8, 5}));
  BlockMapPanel panel;
  for (const float w : {1600.0f, 360.0f}) {
    run_checked_frame(
        [&] {
          ImGui::SetNextWindowPos(ImVec2(0, 0));
          ImGui::SetNextWindowSize(ImVec2(w, w * 0.6f));
          ImGui::Begin("map");
          panel.draw(state);
          ImGui::End();
        },
        "drawing 100k blocks");
  }
  EXPECT_GT(panel.blocks_per_cell(), 1);
  EXPECT_GT(panel.cells_drawn(), 0);
  EXPECT_LE(panel.cells_drawn() * panel.blocks_per_cell(), 100000 + panel.blocks_per_cell() * 2000);
}

}  // namespace
}  // namespace kvscope::ui

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

#include "app/core/generated_text.h"
#include "app/core/headless.h"
#include "app/core/run_session.h"
#include "app/core/shell.h"
#include "app/core/timeline_source.h"
#include "app/demo/demo_source.h"
#include "app/panels/block_map_panel.h"
#include "app/panels/registry.h"
#include "engine/evict/token_evictor.h"
#include "engine/model/locate.h"
#include "engine/scenario/scenario.h"
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

// A caption can choose the variant the run plays and the one Compare runs beside it: reaching a
// caption on another variant re-runs the scenario on it and lands on the caption's step; going
// back to a caption before the first that names a run variant plays the base again. Both hold
// for later captions until one changes them.
TEST(UiHeadless, CaptionsChooseTheRunAndTheCompareVariant) {
  const std::string path = testing::TempDir() + "caption-variants.json";
  {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(minimal_scenario()));
    j.erase("$schema");
    j["compare"] =
        nlohmann::json::parse(R"({"block-8": {"block_size": 8}, "int8": {"kv_dtype": "int8"}})");
    j["captions"] = nlohmann::json::parse(R"([
      {"step": 0, "caption": "base, beside int8", "view": {"compare": "int8"}},
      {"step": 8, "caption": "block 8 plays, beside the base", "view": {"variant": "block-8", "compare": "base", "compare_tab": "text"}},
      {"step": 12, "caption": "still block 8", "view": {"workspace": "pool"}}])");
    std::ofstream(path) << j.dump(2);
  }
  HeadlessImGui imgui(ImVec2(1600, 1000));
  std::unique_ptr<RunSession> run = RunSession::open(path);
  run->wait();
  UiShell shell(std::move(run), imgui.fonts());
  const auto frames_until_applied = [&](const char* what) {
    for (int f = 0; f < 600 && shell.caption_pending(); ++f) {
      run_checked_frame([&] { shell.frame(1.0 / 60.0); }, what);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_FALSE(shell.caption_pending()) << what;
  };
  const auto variant_playing = [&] { return shell.session()->run_info()->override.variant; };
  // Caption 1: the base run, Compare on int8.
  EXPECT_TRUE(shell.go_to_caption(0)) << "the base run is loaded: applied at once";
  EXPECT_EQ(variant_playing(), "");
  EXPECT_EQ(shell.state().compare_variant.variant, "int8");
  // Caption 2: another variant: not at once (the scenario re-runs), then at its step.
  EXPECT_FALSE(shell.go_to_caption(1));
  EXPECT_TRUE(shell.caption_pending());
  frames_until_applied("caption 2");
  EXPECT_EQ(variant_playing(), "block-8");
  EXPECT_EQ(shell.state().header().block_size, 8);
  EXPECT_EQ(shell.state().step(), 8);
  EXPECT_FALSE(shell.state().playing);
  EXPECT_EQ(shell.state().compare_variant.variant, "") << "Compare runs the base beside it";
  EXPECT_EQ(shell.state().compare_tab, 1) << "Compare opens its Text tab";
  // Caption 3 names no variant: block 8 holds, no re-run. The block-8 run may still be computing
  // step 12 (a loaded machine): the caption then waits for it, on the same session.
  const RunSession* block8_run = shell.session();
  if (!shell.go_to_caption(2)) frames_until_applied("caption 3");
  EXPECT_EQ(shell.session(), block8_run) << "caption 3 re-ran the scenario";
  EXPECT_EQ(variant_playing(), "block-8");
  EXPECT_EQ(shell.state().step(), 12);
  // Back to caption 1: the base again, Compare on int8 again.
  EXPECT_FALSE(shell.go_to_caption(0));
  frames_until_applied("back to caption 1");
  EXPECT_EQ(variant_playing(), "");
  EXPECT_EQ(shell.state().header().block_size, 16);
  EXPECT_EQ(shell.state().step(), 0);
  EXPECT_EQ(shell.state().compare_variant.variant, "int8");
}

// The Compare panel's Text tab: each request's generated tokens in both runs, folded from each
// run's own events. The fold equals what the Simulator generated; the same policy says the same,
// and a 2-bit KV cache on stories260K changes some answer.
TEST(UiHeadless, CompareTextFoldsEachRunsGeneratedTokens) {
  const Scenario s = parse_scenario(minimal_scenario());
  const ScenarioModelLoad model = load_scenario_model(s, "", false);
  std::unique_ptr<RunSession> a = RunSession::open(minimal_scenario());
  PolicyOverride int2;
  int2.k_format = parse_kv_format("int2-g8", "test");
  int2.v_format = parse_kv_format("int2-g8", "test");
  std::unique_ptr<RunSession> b = RunSession::open(minimal_scenario(), false, int2);
  a->wait();
  b->wait();
  ResolvedRun resolved = resolve_scenario(s, "", model.shape, model.tokenizer.get());
  Simulator sim(resolved.config, SimModel{model.shape, model.weights},
                std::move(resolved.requests));
  sim.run(100000);
  ASSERT_TRUE(sim.done());
  GeneratedTokens ga, gb;
  const auto fold = [](GeneratedTokens& g, const RunSession& r, long long id) {
    const std::shared_ptr<const Timeline> t = r.timeline();
    g.catch_up(id, t->num_steps() - 1, [&t](int st) { return t->events_at(st); });
  };
  fold(ga, *a, 1);
  fold(gb, *b, 2);
  ASSERT_EQ(ga.tokens().size(), static_cast<std::size_t>(sim.num_requests()));
  int differ = 0;
  for (int i = 0; i < sim.num_requests(); ++i) {
    const int id = sim.request(i).id;
    ASSERT_TRUE(ga.tokens().contains(id)) << id;
    EXPECT_EQ(ga.tokens().at(id), sim.request(i).generated_tokens()) << "request " << id;
    EXPECT_TRUE(compare_tokens(ga.tokens().at(id), ga.tokens().at(id)).same);
    differ += compare_tokens(ga.tokens().at(id), gb.tokens().at(id)).same ? 0 : 1;
  }
  EXPECT_GT(differ, 0) << "2-bit K/V changes at least one of the four stories";
  // Folding stops at a step and starts over when the step goes back.
  GeneratedTokens part;
  const std::shared_ptr<const Timeline> t = a->timeline();
  part.catch_up(1, 10, [&t](int st) { return t->events_at(st); });
  std::size_t at_10 = 0;
  for (const auto& [id, v] : part.tokens()) at_10 += v.size();
  part.catch_up(1, t->num_steps() - 1, [&t](int st) { return t->events_at(st); });
  part.catch_up(1, 10, [&t](int st) { return t->events_at(st); });
  std::size_t again = 0;
  for (const auto& [id, v] : part.tokens()) again += v.size();
  EXPECT_EQ(again, at_10);
  EXPECT_GT(at_10, 0u);
  // compare_tokens: one run further along is still "the same".
  const std::vector<int> x = {1, 2, 3}, y = {1, 2}, z = {1, 5, 3};
  EXPECT_TRUE(compare_tokens(x, y).same);
  EXPECT_EQ(compare_tokens(x, y).common, 2u);
  EXPECT_FALSE(compare_tokens(x, z).same);
  EXPECT_EQ(compare_tokens(x, z).common, 1u);
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

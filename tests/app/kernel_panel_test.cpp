// The Kernel panel on a real run (stories260K's minimal.json): it traces the step shown by itself
// (a model this small), its trace is the one a direct trace of the same step computes through the
// same Simulator on the emulated device, hovering a thread block marks exactly the KV blocks it
// read for the Block pool, a click selects its request, and the format choice re-runs the step on
// the paged kernel. A recording has nothing to re-run, and says so.
#include <gtest/gtest.h>
#include <imgui.h>
#include <imgui_internal.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "app/core/headless.h"
#include "app/core/run_session.h"
#include "app/panels/kernel_panel.h"
#include "engine/kv/kv_format.h"
#include "engine/sched/simulator.h"
#include "kernels/backend/kernel_trace_run.h"
#include "tests/app/ui_test_support.h"

namespace kvscope::ui {
namespace {

std::string scenario(const char* name) {
  return std::string(KVSCOPE_SOURCE_DIR) + "/scenarios/" + name;
}

void frame(KernelPanel& panel, AppState& state, const std::string& what) {
  test::draw_panel_alone(panel, state, "kernel", ImVec2(1000, 800), what);
}

// Draws until the panel's trace of the step shown is in.
const KernelTraceView* traced(KernelPanel& panel, AppState& state, const std::string& what) {
  for (int f = 0; f < 6; ++f) {
    frame(panel, state, what);
    panel.wait_for_trace();
    const KernelTraceView* v = panel.shown();
    if (v != nullptr && v->ui_step == state.step() && !panel.busy()) {
      frame(panel, state, what + " (drawn)");
      return panel.shown();
    }
  }
  return panel.shown();
}

TEST(KernelPanel, TracesTheStepShownAsADirectTraceDoesAndLinksTheBlockPool) {
  HeadlessImGui imgui(ImVec2(1000, 800));
  std::unique_ptr<RunSession> run = RunSession::open(scenario("minimal.json"));
  run->wait();
  AppState state(run->make_source());
  state.set_step(11);
  KernelPanel panel;
  ImGui::GetIO().MousePos = ImVec2(-1, -1);
  const KernelTraceView* v = traced(panel, state, "step 11");
  ASSERT_NE(v, nullptr);
  ASSERT_TRUE(v->error.empty()) << v->error;
  ASSERT_NE(v->trace, nullptr);
  EXPECT_TRUE(v->same_pool);
  const StepKernelTrace& t = *v->trace;
  EXPECT_EQ(t.step, 11);
  EXPECT_EQ(t.summary.kernel, "decode_split_batch_kernel");

  // The same step traced directly (build_scenario_run and trace_next_step).
  PolicyOverride policy;
  policy.backend = "cuda-sim";
  ScenarioRun direct = build_scenario_run(scenario("minimal.json"), false, policy, "");
  direct.sim->run(11);
  const StepKernelTrace want = trace_next_step(*direct.sim, 0, "minimal.json");
  EXPECT_EQ(t.summary.kv.sectors, want.summary.kv.sectors);
  EXPECT_EQ(t.summary.kv.ideal_sectors, want.summary.kv.ideal_sectors);
  EXPECT_EQ(t.summary.kv.distinct_bytes, want.summary.kv.distinct_bytes);
  EXPECT_EQ(t.query_request, want.query_request);
  ASSERT_EQ(t.summary.blocks.size(), want.summary.blocks.size());
  // The KV writes before the launch: a token each, into the same blocks.
  ASSERT_EQ(t.writes.size(), want.writes.size());
  ASSERT_EQ(t.writes.size(), t.query_request.size());
  for (std::size_t i = 0; i < t.writes.size(); ++i) {
    EXPECT_EQ(t.writes[i].kv_block, want.writes[i].kv_block) << "write " << i;
    EXPECT_EQ(t.writes[i].request, want.writes[i].request) << "write " << i;
  }
  // The Block pool shows the run's pool: its tables are the trace's.
  for (const StepKernelTrace::Table& table : t.block_tables) {
    const RequestState* r = find_request(state.pool(), table.request);
    ASSERT_NE(r, nullptr) << "request " << table.request;
    EXPECT_EQ(r->blocks, table.blocks) << "request " << table.request;
  }

  // Hovering thread block 5 (query 1, KV head 1) marks its blocks; a click selects its request.
  const int block = 5;
  const sim::ThreadBlockTrace& tb = t.summary.blocks[block];
  ASSERT_TRUE(tb.role.has_value());
  ImGui::GetIO().MousePos = panel.cell_center(block);
  frame(panel, state, "hover");
  frame(panel, state, "hover again");
  EXPECT_EQ(panel.hovered_block(), block);
  EXPECT_EQ(state.kernel_blocks, tb.kv_blocks);
  EXPECT_EQ(state.kernel_request, t.query_request[static_cast<std::size_t>(tb.role->query)]);
  EXPECT_FALSE(state.kernel_blocks.empty());
  ImGui::GetIO().MouseDown[0] = true;
  frame(panel, state, "press");
  ImGui::GetIO().MouseDown[0] = false;
  frame(panel, state, "release");
  EXPECT_EQ(state.selected_request, t.query_request[static_cast<std::size_t>(tb.role->query)]);
  // The outline is fresh while hovered (this frame or the last), and goes once the mouse does.
  EXPECT_GE(state.kernel_blocks_frame, ImGui::GetFrameCount() - 1);
  ImGui::GetIO().MousePos = ImVec2(-1, -1);
  frame(panel, state, "away");
  frame(panel, state, "away again");
  EXPECT_LT(state.kernel_blocks_frame, ImGui::GetFrameCount() - 1);

  // int4 K/V: the paged kernel, one block per query head, on a re-run that is not the pool shown.
  panel.set_format(parse_kv_format("int4", "test"));
  const KernelTraceView* v4 = traced(panel, state, "int4");
  ASSERT_NE(v4, nullptr);
  ASSERT_NE(v4->trace, nullptr) << v4->error;
  EXPECT_EQ(v4->trace->summary.kernel, "paged_attention_batch_kernel");
  EXPECT_FALSE(v4->same_pool);
  EXPECT_EQ(v4->trace->k_format, "int4");
  // Its thread-per-slot K loads: each lane in another row, far from coalesced.
  const sim::Traffic& k4 = v4->trace->summary.by_what[sim::kTraceKCodes];
  EXPECT_LT(k4.ideal_sectors * 4, k4.sectors);
}

// The GPU's time for the launch shown: the GPU check's shipped file holds kernel-coalescing.json's
// launches as `kvscope trace kernel --measure` ran them, and the panel's own re-run of that
// scenario meets the same shapes (its queries and contexts); a file without the shape says so.
TEST(KernelPanel, StatesTheGpusTimeForTheSameLaunchShape) {
  HeadlessImGui imgui(ImVec2(1000, 800));
  std::unique_ptr<RunSession> run = RunSession::open(scenario("kernel-coalescing.json"));
  run->wait();
  AppState state(run->make_source());
  state.set_step(40);
  KernelPanel panel;
  ImGui::GetIO().MousePos = ImVec2(-1, -1);
  const KernelTraceView* v = traced(panel, state, "step 40");
  ASSERT_NE(v, nullptr);
  ASSERT_NE(v->trace, nullptr) << v->error;
  EXPECT_EQ(v->shape, launch_shape(*v->trace));
  const std::string& shipped = panel.measured_text();
  EXPECT_EQ(shipped.rfind("GPU (NVIDIA ", 0), 0u) << shipped;
  EXPECT_NE(shipped.find(" for this launch, "), std::string::npos) << shipped;

  KernelTimings mine;
  mine.device = "Test GPU";
  mine.copy_gb_per_s = 1000.0;
  MeasuredLaunch m;
  m.shape = v->shape;
  m.kv_bytes = v->trace->summary.kv_unique_bytes;
  m.ms = 0.01;
  m.ms_min = 0.009;
  mine.add(m);
  panel.set_timings(mine);
  frame(panel, state, "own timings");
  // The rate is the emulator's distinct bytes over the GPU's time.
  char rate[48];
  std::snprintf(rate, sizeof rate, "%.1f GB/s",
                static_cast<double>(v->trace->summary.kv_unique_bytes) / 0.01 / 1e6);
  EXPECT_EQ(panel.measured_text().rfind(
                std::string("GPU (Test GPU): 10.0 us for this launch, ") + rate, 0),
            0u)
      << panel.measured_text();

  mine.launches.front().shape.contexts.push_back(1);  // another launch
  panel.set_timings(mine);
  frame(panel, state, "shape not measured");
  EXPECT_EQ(panel.measured_text(), "GPU: this launch shape was not measured");
}

// A prefill step's many queries make the grid taller than it is shown, and it scrolls: its
// scrollbar comes out of the cells' width, not past the window's edge.
TEST(KernelPanel, AScrollingGridFitsItsWidth) {
  HeadlessImGui imgui(ImVec2(1000, 800));
  std::unique_ptr<RunSession> run = RunSession::open(scenario("kernel-coalescing.json"));
  run->wait();
  AppState state(run->make_source());
  state.set_step(0);  // two prompts' prefill: 22 queries, one row each
  KernelPanel panel;
  const KernelTraceView* v = traced(panel, state, "step 0");
  ASSERT_NE(v, nullptr);
  ASSERT_NE(v->trace, nullptr) << v->error;
  ASSERT_GT(v->trace->summary.grid.y, 8u);
  // Narrow, so that the cells take the whole width (ImGui sizes a window's content a frame late).
  for (int f = 0; f < 2; ++f)
    test::draw_panel_alone(panel, state, "kernel", ImVec2(420, 800), "step 0, narrow");
  int grids = 0;
  for (ImGuiWindow* w : ImGui::GetCurrentContext()->Windows) {
    if (!w->WasActive || std::string(w->Name).find("/##grid_") == std::string::npos) continue;
    ++grids;
    EXPECT_TRUE(w->ScrollbarY);
    EXPECT_LE(w->ContentSize.x, w->WorkRect.GetWidth() + 1.0f) << w->Name;
  }
  EXPECT_EQ(grids, 1);
}

TEST(KernelPanel, ARecordingHasNothingToReRun) {
  HeadlessImGui imgui(ImVec2(1000, 800));
  std::unique_ptr<RunSession> run = RunSession::open(scenario("minimal.json"));
  run->wait();
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("kvscope_kernel_panel_" + std::to_string(getpid()) + ".kvr"))
                               .string();
  run->timeline()->save(path);
  std::unique_ptr<RunSession> rec = RunSession::open(path);
  AppState state(rec->make_source());
  KernelPanel panel;
  frame(panel, state, "a recording");
  EXPECT_FALSE(panel.busy());
  EXPECT_EQ(panel.shown(), nullptr);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace kvscope::ui

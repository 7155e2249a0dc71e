// The Controls panel's model picker: switching the run to SmolLM2-135M restarts it on that model
// (vocabulary 49152), names the model in the quality and attention titles with stable window IDs
// and runs their background jobs on it; a model that fails to load, or a scenario it cannot run,
// is an error that keeps the previous run. SmolLM2 must be present (scripts/models.sh): a missing
// file fails these tests, it does not skip them.
#include <gtest/gtest.h>
#include <imgui.h>
#include <imgui_internal.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "app/core/headless.h"
#include "app/core/run_session.h"
#include "app/core/shell.h"
#include "app/panels/attention_panel.h"
#include "app/panels/controls_panel.h"
#include "app/panels/quality_panel.h"
#include "engine/model/locate.h"
#include "tests/app/ui_test_support.h"

namespace kvscope::ui {
namespace {

using test::run_checked_frame;

constexpr int kSmolVocab = 49152;

std::string scenario(const char* name) {
  return std::string(KVSCOPE_SOURCE_DIR) + "/scenarios/" + name;
}

template <typename T>
T* find_panel(UiShell& shell) {
  for (auto& p : shell.panels())
    if (auto* t = dynamic_cast<T*>(p.get())) return t;
  return nullptr;
}

// Frames until the shell took the model request (it loads two frames after the request, so the
// "loading" line is on screen first); returns how many frames that took.
int frames_until_loaded(UiShell& shell, const std::string& what) {
  int frames = 0;
  while (shell.state().model_request && frames < 10) {
    run_checked_frame([&] { shell.frame(1.0 / 60.0); }, what + ", frame " + std::to_string(frames));
    ++frames;
  }
  EXPECT_FALSE(shell.state().model_request.has_value()) << what << ": the request was never taken";
  shell.finish_opening();  // the new run is shown once its first step is there
  return frames;
}

TEST(ModelPicker, ListsTheScenarioModelAndEveryNamedModelOnDisk) {
  std::unique_ptr<RunSession> run = RunSession::open(scenario("minimal.json"), true);
  const std::vector<ModelChoice> choices = ControlsPanel::model_choices(*run->run_info());
  ASSERT_EQ(choices.size(), 1 + named_models().size());
  EXPECT_EQ(choices[0].arg, "");
  EXPECT_EQ(choices[0].label, "scenario default: stories260K");
  EXPECT_TRUE(choices[0].missing.empty()) << choices[0].missing;
  bool smollm2 = false;
  for (const ModelChoice& c : choices) {
    if (c.arg != "smollm2") continue;
    smollm2 = true;
    EXPECT_EQ(c.label, "smollm2 (SmolLM2-135M-Instruct)");
    EXPECT_TRUE(c.missing.empty()) << "SmolLM2 must be on disk for these tests: " << c.missing;
    EXPECT_NE(c.found.find("SmolLM2-135M-Instruct"), std::string::npos) << c.found;
  }
  EXPECT_TRUE(smollm2) << "named_models() lists smollm2";
  EXPECT_EQ(model_display_name(""), "stories260K");
  EXPECT_EQ(model_display_name("smollm2"), "SmolLM2-135M-Instruct");
  EXPECT_EQ(model_display_name("/m/SmolLM2-135M-Instruct.Q4_1.gguf"), "SmolLM2-135M-Instruct");
  EXPECT_EQ(model_display_name("/m/my.model.bin"), "my.model");
}

TEST(ModelPicker, SwitchesTheRunToSmolLM2AndNamesItInTheQualityTitle) {
  HeadlessImGui imgui(ImVec2(1400, 900));
  UiShell shell(RunSession::open(scenario("minimal.json"), /*bookkeeping=*/true), imgui.fonts());
  shell.set_workspace(2);  // Attention & quality: Attention, Quality vs memory, Text, Controls
  auto* quality = find_panel<QualityPanel>(shell);
  auto* attention = find_panel<AttentionPanel>(shell);
  ASSERT_NE(quality, nullptr);
  ASSERT_NE(attention, nullptr);
  run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "stories260K run");
  const ImGuiWindow* quality_window = ImGui::FindWindowByName(panel_window_id(*quality).c_str());
  ASSERT_NE(quality_window, nullptr);
  const ImGuiID quality_id = quality_window->ID;
  const ImVec2 quality_pos = quality_window->Pos;
  const RunSession* before = shell.session();
  ASSERT_EQ(shell.session()->run_info()->shape.vocab_size, 512);
  const int generation = shell.state().source_generation();

  // What picking "smollm2 (SmolLM2-135M-Instruct)" in the combo does.
  ASSERT_TRUE(ControlsPanel::choose_model(shell.state(), "smollm2"));
  EXPECT_FALSE(ControlsPanel::choose_model(shell.state(), "smollm2")) << "already requested";
  EXPECT_GE(frames_until_loaded(shell, "switching to smollm2"), 3)
      << "two frames say 'loading' before the load blocks the UI thread";
  EXPECT_TRUE(shell.error_text().empty()) << shell.error_text();
  ASSERT_NE(shell.session(), before) << "the run restarted";
  EXPECT_GT(shell.state().source_generation(), generation);
  const std::shared_ptr<const RunInfo> info = shell.session()->run_info();
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->model_override, "smollm2");
  EXPECT_EQ(info->shape.vocab_size, kSmolVocab);
  ASSERT_NE(info->model, nullptr) << "the shell runs the model, not bookkeeping";
  EXPECT_EQ(info->model->config().vocab_size, kSmolVocab);
  ASSERT_NE(info->tokenizer, nullptr);
  EXPECT_EQ(info->tokenizer->vocab_size(), kSmolVocab);
  EXPECT_EQ(info->model_name, "SmolLM2-135M-Instruct");
  EXPECT_EQ(info->override, PolicyOverride{}) << "the policy is kept (none here)";
  EXPECT_EQ(shell.state().step(), 0) << "restarted from step 0";
  // The worker would decode hundreds of SmolLM2 steps: stop it, the panels draw what is there.
  shell.session()->stop();
  shell.state().playing = false;

  EXPECT_EQ(quality->shown_title(shell.state()), "Quality vs memory: SmolLM2-135M-Instruct");
  EXPECT_EQ(attention->shown_title(shell.state()), "Attention: SmolLM2-135M-Instruct");
  run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "smollm2 run");
  quality_window = ImGui::FindWindowByName(panel_window_id(*quality).c_str());
  ASSERT_NE(quality_window, nullptr);
  // What the shell passes to ImGui::Begin (ImGui draws that title but keeps the first name in
  // ImGuiWindow::Name): the model in the shown title, the panel's title as the ID.
  EXPECT_EQ(panel_window_name(*quality, shell.state()),
            "Quality vs memory: SmolLM2-135M-Instruct###Quality vs memory");
  EXPECT_EQ(quality_window->ID, quality_id) << "the window ID survives the title change";
  EXPECT_EQ(quality_window->Pos.x, quality_pos.x);
  EXPECT_EQ(quality_window->Pos.y, quality_pos.y);
  // Ctrl+R and policy changes keep the model.
  PolicyOverride o;
  o.block_size = 8;
  shell.state().restart_request = o;
  run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "policy restart on smollm2");
  shell.finish_opening();
  EXPECT_EQ(shell.session()->run_info()->model_override, "smollm2");
  EXPECT_EQ(shell.session()->run_info()->config.block_size, 8);
  shell.restart();  // Ctrl+R
  shell.finish_opening();
  EXPECT_EQ(shell.session()->run_info()->model_override, "smollm2");
  EXPECT_EQ(shell.session()->run_info()->shape.vocab_size, kSmolVocab);
  EXPECT_EQ(shell.session()->run_info()->config.block_size, 8);
  shell.session()->stop();
  shell.state().playing = false;
  shell.state().set_step(0);

  // The background jobs run on the session's model: the sweep was started for SmolLM2's file and
  // the attention capture has SmolLM2's 30 layers.
  for (int f = 0; f < 40 && !attention->capture(0); ++f) {
    run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "capturing on smollm2");
    attention->wait_for_capture();
  }
  EXPECT_EQ(quality->sweep_model(), shell.session()->run_info()->model_source);
  EXPECT_TRUE(quality->busy()) << "the sweep computes on SmolLM2 in the background";
  const AttentionCapture* cap = attention->capture(0);
  ASSERT_NE(cap, nullptr);
  EXPECT_EQ(cap->n_layers, shell.session()->run_info()->shape.n_layers);
  EXPECT_EQ(cap->n_heads, shell.session()->run_info()->shape.n_heads);
  EXPECT_NE(cap->n_layers, 5) << "not stories260K's";
}

TEST(ModelPicker, AMissingModelFileIsAnErrorAndKeepsThePreviousModel) {
  HeadlessImGui imgui(ImVec2(1200, 800));
  UiShell shell(RunSession::open(scenario("minimal.json"), /*bookkeeping=*/true), imgui.fonts());
  shell.set_workspace(1);  // Prefix: Controls is shown, no background model jobs
  run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "first frame");
  const RunSession* before = shell.session();
  const std::string missing = testing::TempDir() + "no-such-model.Q4_1.gguf";
  std::filesystem::remove(missing);
  ASSERT_TRUE(ControlsPanel::choose_model(shell.state(), missing));
  frames_until_loaded(shell, "choosing a missing model file");
  EXPECT_NE(shell.error_text().find("no-such-model.Q4_1.gguf"), std::string::npos)
      << shell.error_text();
  EXPECT_EQ(shell.session(), before) << "the previous run stays loaded";
  EXPECT_EQ(shell.session()->run_info()->model_override, "");
  EXPECT_EQ(shell.session()->run_info()->shape.vocab_size, 512);
  for (int f = 0; f < 3; ++f) run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "error modal");

  // A scenario the chosen model cannot run: token ids beyond stories260K's 512-token vocabulary.
  const std::string path = testing::TempDir() + "smollm2-token-ids.json";
  {
    std::ofstream f(path);
    f << R"({"format_version": 1, "title": "token ids of SmolLM2", "model": "smollm2",
             "cache": {"block_size": 16, "num_blocks": 16},
             "workload": {"requests": [{"prompt_tokens": [1, 30000, 4000], "max_new_tokens": 4}]}})";
  }
  ASSERT_TRUE(shell.open(path)) << shell.error_text();
  shell.finish_opening();
  shell.session()->wait();
  EXPECT_EQ(shell.session()->run_info()->shape.vocab_size, kSmolVocab);
  before = shell.session();
  ASSERT_TRUE(ControlsPanel::choose_model(shell.state(), "stories260K"));
  frames_until_loaded(shell, "choosing a model the scenario cannot run on");
  EXPECT_NE(shell.error_text().find("prompt_tokens[1]"), std::string::npos) << shell.error_text();
  EXPECT_EQ(shell.session(), before) << "the SmolLM2 run stays loaded";
  EXPECT_EQ(shell.session()->run_info()->shape.vocab_size, kSmolVocab);
  EXPECT_EQ(shell.session()->run_info()->model_override, "");
}

}  // namespace
}  // namespace kvscope::ui

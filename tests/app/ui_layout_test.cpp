// Layout at talk resolutions: at 1280x720, 1600x1000 and 1920x1080, in presenter mode and out of
// it, no window of any workspace has content wider than its visible width (a widget or a line cut
// at the right edge), unless the window scrolls horizontally. ImGui records each window's content
// extent (the furthest any item reached) every frame; a cut widget is one whose extent passes the
// work rect.
#include <gtest/gtest.h>
#include <imgui.h>
#include <imgui_internal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "app/core/headless.h"
#include "app/core/run_session.h"
#include "app/core/shell.h"
#include "tests/app/ui_test_support.h"

namespace kvscope::ui {
namespace {

// "Controls: content 412 px, visible 300 px" for every window drawn last frame whose content
// is wider than its work rect (tooltips, popups and horizontally scrolling windows excepted).
std::vector<std::string> cut_windows() {
  std::vector<std::string> out;
  for (ImGuiWindow* w : GImGui->Windows) {
    if (!w->WasActive || w->Hidden || w->ScrollbarX) continue;
    if ((w->Flags & (ImGuiWindowFlags_Tooltip | ImGuiWindowFlags_Popup)) != 0) continue;
    // The main menu bar's right-aligned run title is ellipsized to fit by design.
    if (std::string(w->Name) == "##MainMenuBar") continue;
    const float visible = w->WorkRect.GetWidth();
    if (w->ContentSize.x <= visible + 1.0f) continue;
    char line[512];
    std::snprintf(line, sizeof line, "%s: content %.0f px, visible %.0f px", w->Name,
                  w->ContentSize.x, visible);
    out.emplace_back(line);
  }
  return out;
}

// Each workspace, normal and presenter mode, at three window sizes, on a token-eviction
// scenario (the example: past-context.json) and a prefix-caching one.
TEST(UiLayout, NoWidgetIsCutAtTalkResolutions) {
  for (const char* name : {"past-context.json", "shared-system-prompt.json"}) {
    const std::string scenario = std::string(KVSCOPE_SOURCE_DIR) + "/scenarios/" + name;
    for (const ImVec2 size : {ImVec2(1280, 720), ImVec2(1600, 1000), ImVec2(1920, 1080)}) {
      HeadlessImGui imgui(size);
      UiShell shell(RunSession::open(scenario), imgui.fonts());
      // A finished run, paused: what a frame shows does not change under the check (ImGui
      // measures a window's content one frame late, so a run still growing could show a
      // scrollbar appearing as a cut).
      shell.session()->wait();
      shell.state().playing = false;
      shell.state().set_step(shell.state().num_steps() / 2);
      for (int mode = 0; mode < 2; ++mode) {
        for (int w = 0; w < UiShell::num_workspaces(); ++w) {
          shell.set_presenter(mode == 1);
          shell.set_workspace(w);
          const std::string where = std::string(name) + " " + std::to_string(int(size.x)) + "x" +
                                    std::to_string(int(size.y)) +
                                    (mode == 1 ? " presenter " : " ") + UiShell::workspace_name(w);
          for (int f = 0; f < 4; ++f)
            test::run_checked_frame([&] { shell.frame(1.0 / 60.0); }, where);
          for (const std::string& cut : cut_windows()) ADD_FAILURE() << where << ": " << cut;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvscope::ui

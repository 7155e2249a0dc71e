// Legibility at talk resolutions: every workspace of every shipped scenario (SmolLM2 ones:
// smollm2-chat.json only, see shipped_scenarios), at 1280x720,
// 1600x1000 and 1920x1080, in presenter mode and out of it, shows only panels that get their
// legible minimum (shell_layout.h: content lines x font widths, plots kMinPlotLines tall, tables a
// header and kMinTableRows rows), with no text cut: no panel title wider than its title bar, no
// axis title ellipsized, no legend dropped, no "enlarge the panel", no vertical scrollbar on a
// panel whose lesson must show whole, and no content wider than its window. Everything is
// measured from ImGui's own rectangles (window WorkRect, ContentSize, title bar) and the item
// rectangles the widgets record through the layout probe, never from pixels.
#include <gtest/gtest.h>
#include <imgui.h>
#include <imgui_internal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "app/core/headless.h"
#include "app/core/run_session.h"
#include "app/core/shell.h"
#include "app/core/shell_layout.h"
#include "app/widgets/layout_probe.h"
#include "tests/app/ui_test_support.h"

namespace kvscope::ui {
namespace {

std::vector<std::string> shipped_scenarios() {
  std::vector<std::string> out;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(KVSCOPE_SOURCE_DIR) + "/scenarios")) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".json" || name == "scenario.schema.json") continue;
    // SmolLM2 scenarios take 4-7 s each to run on two cores and draw the same panels with the
    // same content kinds as smollm2-chat.json (the example), which stays.
    if (name.rfind("smollm2-", 0) == 0 && name != "smollm2-chat.json") continue;
    out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string printf_string(const char* fmt, double a, double b, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, a, b, c, d);
  return buf;
}

// The problems of one frame's layout, for the visible panels of `shell`.
std::vector<std::string> legibility_problems(UiShell& shell) {
  std::vector<std::string> out;
  const float line = ImGui::GetTextLineHeightWithSpacing();
  const float em = ImGui::GetFontSize();
  const ImGuiStyle& style = ImGui::GetStyle();
  std::map<std::string, std::string> title_of_window;  // window name -> panel title
  for (const auto& p : shell.panels()) {
    if (!p->visible) continue;
    const std::string title = p->title();
    ImGuiWindow* w = ImGui::FindWindowByName(panel_window_id(*p).c_str());
    if (w == nullptr || !w->WasActive) {
      out.push_back(title + ": visible but not drawn");
      continue;
    }
    title_of_window[w->Name] = title;
    const LegibleMinimum min = legible_minimum(title);
    const ImVec2 content(w->WorkRect.GetWidth(), w->WorkRect.GetHeight());
    if (content.y < min.lines * line - 0.5f || content.x < min.ems * em - 0.5f)
      out.push_back(title + printf_string(": content %.1f lines x %.1f ems, minimum %.1f x %.1f",
                                          content.y / line, content.x / em, min.lines, min.ems));
    if (!min.may_scroll && w->ScrollbarY)
      out.push_back(title + printf_string(": scrolls (content %.0f px, visible %.0f px)",
                                          w->ContentSize.y, content.y));
    // The shown title and the close button fit the title bar.
    const std::string shown = p->shown_title(shell.state());
    const float need = ImGui::CalcTextSize(shown.c_str()).x + style.FramePadding.x * 2.0f +
                       style.ItemInnerSpacing.x + em;
    if (need > w->TitleBarRect().GetWidth() + 0.5f)
      out.push_back(title + ": title \"" + shown + "\" cut" +
                    printf_string(" (%.0f px of %.0f)", need, w->TitleBarRect().GetWidth()));
  }
  // Content wider than its window (the original "no widget cut" check), panels and their
  // children, tooltips and popups excepted.
  for (ImGuiWindow* w : GImGui->Windows) {
    if (!w->WasActive || w->Hidden || w->ScrollbarX) continue;
    if ((w->Flags & (ImGuiWindowFlags_Tooltip | ImGuiWindowFlags_Popup)) != 0) continue;
    if (std::string(w->Name) == "##MainMenuBar") continue;  // its run title is ellipsized
    if (w->ContentSize.x > w->WorkRect.GetWidth() + 1.0f)
      out.push_back(std::string(w->Name) + printf_string(": content %.0f px wide, visible %.0f px",
                                                         w->ContentSize.x, w->WorkRect.GetWidth()));
  }
  for (const ProbeRecord& r : probe_records()) {
    const auto it = title_of_window.find(r.window);
    if (it == title_of_window.end()) continue;  // not a panel of the layout
    const std::string where = it->second + " / " + r.what;
    const float h = r.max.y - r.min.y, w = r.max.x - r.min.x;
    switch (r.kind) {
      case ProbeKind::kPlot:
        if (h < kMinPlotLines * r.line_height - 0.5f || w < kMinPlotEms * r.font_size - 0.5f)
          out.push_back(where + printf_string(": plot %.1f lines x %.1f ems, minimum %.0f x %.0f",
                                              h / r.line_height, w / r.font_size, kMinPlotLines,
                                              kMinPlotEms));
        break;
      case ProbeKind::kTable: {
        const float row = r.line_height + style.CellPadding.y * 2.0f;
        const int rows = static_cast<int>((h + 0.5f) / row) - 1;  // less the header
        if (rows < kMinTableRows)
          out.push_back(
              where + printf_string(": table shows %.0f rows, minimum %.0f", rows, kMinTableRows));
        break;
      }
      case ProbeKind::kTextCut:
        out.push_back(where + ": text cut");
        break;
      case ProbeKind::kNoRoom:
        out.push_back(where + ": no room to draw");
        break;
    }
  }
  return out;
}

TEST(UiLayout, EveryWorkspaceIsLegibleAtTalkResolutions) {
  const std::vector<std::string> scenarios = shipped_scenarios();
  ASSERT_FALSE(scenarios.empty());
  HeadlessImGui imgui(ImVec2(1280, 720));
  probe_enable(true);
  double run_seconds = 0.0;
  std::map<std::string, std::string> layouts;  // "<size> <mode> <workspace>" -> layouts chosen
  for (const std::string& name : scenarios) {
    const auto t0 = std::chrono::steady_clock::now();
    UiShell shell(RunSession::open(std::string(KVSCOPE_SOURCE_DIR) + "/scenarios/" + name),
                  imgui.fonts());
    // A finished run, paused: what a frame shows does not change under the check (ImGui measures
    // a window's content one frame late).
    shell.session()->wait();
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    run_seconds += took;
    std::printf("[ run        ] %-36s %.2f s\n", name.c_str(), took);
    shell.state().playing = false;
    shell.state().set_step(shell.state().num_steps() / 2);
    for (const ImVec2 size : {ImVec2(1280, 720), ImVec2(1600, 1000), ImVec2(1920, 1080)}) {
      ImGui::GetIO().DisplaySize = size;
      for (int mode = 0; mode < 2; ++mode) {
        shell.set_presenter(mode == 1);
        for (int ws = 0; ws < UiShell::num_workspaces(); ++ws) {
          shell.set_workspace(ws);
          const std::string at = std::to_string(int(size.x)) + "x" + std::to_string(int(size.y)) +
                                 (mode == 1 ? " presenter " : " normal ") +
                                 UiShell::workspace_name(ws);
          const std::string where = name + " " + at;
          std::vector<std::string> problems;
          // A panel's background job (the Kernel panel's trace of the step, ...) changes what it
          // draws when it starts or lands, and ImGui measures a window's content one frame late:
          // the frames measured must not straddle such a change, so they are drawn again when
          // one happened among them (a long job is measured as it stands, running).
          for (int attempt = 0; attempt < 6; ++attempt) {
            const bool busy_before = shell.panels_busy();
            bool changed = false;
            for (int f = 0; f < 4; ++f) {
              test::run_checked_frame(
                  [&] {
                    shell.frame(1.0 / 60.0);
                    if (f == 3) problems = legibility_problems(shell);
                  },
                  where);
              changed = changed || shell.panels_busy() != busy_before;
            }
            if (!changed) break;
          }
          for (const std::string& p : problems) ADD_FAILURE() << where << ": " << p;
          std::string& chosen = layouts[at];
          const std::string index = std::to_string(shell.layout());
          if (chosen.find(index) == std::string::npos)
            chosen += (chosen.empty() ? "" : ",") + index;
        }
      }
    }
  }
  probe_enable(false);
  std::printf("[ legibility ] %zu scenarios; runs %.1f s\n", scenarios.size(), run_seconds);
  for (const auto& [at, chosen] : layouts)
    std::printf("[ layout     ] %-40s layout %s\n", at.c_str(), chosen.c_str());
}

}  // namespace
}  // namespace kvscope::ui

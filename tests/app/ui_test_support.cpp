// Headless UI test helpers.
#include "tests/app/ui_test_support.h"

#include <gtest/gtest.h>
#include <imgui.h>
#include <imgui_internal.h>

#include <cstdarg>
#include <cstdio>

namespace kvscope::ui::test {

std::string& current_activity() {
  static std::string activity = "setting up";
  return activity;
}

namespace {

struct ErrorLog {
  int count = 0;
  std::string text;
};

void on_error(void* user, const char* fmt, ...) {
  auto* log = static_cast<ErrorLog*>(user);
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  ++log->count;
  log->text += buf;
}

}  // namespace

int run_checked_frame(const std::function<void()>& body, const std::string& activity) {
  current_activity() = activity;
  ImGui::GetIO().DeltaTime = 1.0f / 60.0f;
  ImGui::NewFrame();
  body();
  ErrorLog log;
  ImGui::ErrorCheckEndFrameRecover(on_error, &log);
  if (log.count > 0) ADD_FAILURE() << "ImGui errors while " << activity << ": " << log.text;
  ImGui::Render();
  current_activity() = "between frames";
  return log.count;
}

int panel_vertices(const std::string& title) {
  ImGuiWindow* w = ImGui::FindWindowByName(("###" + title).c_str());
  if (w == nullptr) return -1;
  int n = w->DrawList->VtxBuffer.Size;
  for (ImGuiWindow* child : w->DC.ChildWindows) n += child->DrawList->VtxBuffer.Size;
  return n;
}

int draw_panel_alone(Panel& panel, AppState& state, const char* title, ImVec2 size,
                     const std::string& activity) {
  int vertices = 0;
  run_checked_frame(
      [&] {
        ImGui::SetNextWindowPos(ImVec2(0, 0));
        ImGui::SetNextWindowSize(size);
        ImGui::Begin(title);
        panel.draw(state);
        vertices = ImGui::GetWindowDrawList()->VtxBuffer.Size;
        ImGui::End();
      },
      activity);
  return vertices;
}

}  // namespace kvscope::ui::test

// An ImGui context with no window and no renderer: display size set by hand, font atlas built in
// memory. Used by the headless UI tests and the frame-time benchmark.
#pragma once

#include <imgui.h>

#include "app/core/theme.h"

namespace kvscope::ui {

class HeadlessImGui {
 public:
  explicit HeadlessImGui(ImVec2 display_size);
  ~HeadlessImGui();
  HeadlessImGui(const HeadlessImGui&) = delete;
  HeadlessImGui& operator=(const HeadlessImGui&) = delete;

  const Fonts& fonts() const { return fonts_; }
  void new_frame(float dt_seconds = 1.0f / 60.0f);
  ImDrawData* render();  // ends the frame and returns its draw data

 private:
  ImGuiContext* context_ = nullptr;
  Fonts fonts_;
};

}  // namespace kvscope::ui

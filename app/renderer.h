// kvscope-ui's OpenGL renderer for ImGui's draw data: the same pixels as ImGui's OpenGL3 backend,
// drawn in runs that skip the font-atlas sample and the blend where a triangle does not need them
// (app/core/draw_runs.h). On a software rasterizer, a browser's SwiftShader above all, that is
// most of a frame's cost. It also reads no GL state back: in a browser each read waits for the
// rasterizer to finish the frame before.
//
// ImGui's backend still makes the font atlas (ImGui_ImplOpenGL3_NewFrame); `--renderer imgui`
// draws with the backend instead, for comparison.
#pragma once

#include <imgui.h>

#include <vector>

#include "app/core/draw_runs.h"

namespace kvscope::ui {

class DrawRenderer {
 public:
  // Compiles the two programs for the context that is current (GLSL 1.30 on the desktop, GLSL ES
  // 3.00 in the browser); throws kvscope::Error if the driver refuses them (kvscope-ui then draws
  // with ImGui's backend).
  DrawRenderer();
  ~DrawRenderer();
  DrawRenderer(const DrawRenderer&) = delete;
  DrawRenderer& operator=(const DrawRenderer&) = delete;

  // Draws `data` into the current framebuffer (over what is there). Leaves blending on and the
  // scissor test off.
  void render(const ImDrawData& data);

 private:
  void point_attributes(unsigned vertex_offset);

  unsigned textured_program_ = 0;
  unsigned flat_program_ = 0;
  int textured_proj_ = -1;
  int flat_proj_ = -1;
  int atlas_ = -1;
  unsigned vao_ = 0;
  unsigned vbo_ = 0;
  unsigned ebo_ = 0;
  std::vector<DrawRun> runs_;
};

}  // namespace kvscope::ui

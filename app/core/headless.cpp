// Headless ImGui context.
#include "app/core/headless.h"

namespace kvscope::ui {

HeadlessImGui::HeadlessImGui(ImVec2 display_size) {
  IMGUI_CHECKVERSION();
  context_ = ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;
  io.DisplaySize = display_size;
  io.BackendFlags |=
      ImGuiBackendFlags_RendererHasVtxOffset;  // large draw lists, like the GL3 backend
  fonts_ = load_fonts(io);
  unsigned char* pixels = nullptr;
  int w = 0, h = 0;
  io.Fonts->GetTexDataAsRGBA32(&pixels, &w, &h);  // builds the atlas; no texture upload
  io.Fonts->SetTexID(nullptr);
}

HeadlessImGui::~HeadlessImGui() {
  ImGui::DestroyContext(context_);
}

void HeadlessImGui::new_frame(float dt_seconds) {
  ImGui::GetIO().DeltaTime = dt_seconds;
  ImGui::NewFrame();
}

ImDrawData* HeadlessImGui::render() {
  ImGui::Render();
  return ImGui::GetDrawData();
}

}  // namespace kvscope::ui

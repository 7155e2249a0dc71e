// Palette, style and fonts of kvscope-ui.
#include "app/core/theme.h"

#include <cmath>
#include <filesystem>

namespace kvscope::ui {

namespace {

constexpr ImU32 rgb(int r, int g, int b, int a = 255) {
  return IM_COL32(r, g, b, a);
}

ImVec4 v4(ImU32 c) {
  return ImGui::ColorConvertU32ToFloat4(c);
}

// clang-format off
const Palette kCalm{
    .window_bg = rgb(17, 19, 24),      .panel_bg = rgb(24, 27, 34),
    .text = rgb(222, 226, 232),        .text_dim = rgb(138, 146, 160),
    .accent = rgb(94, 176, 239),       .grid = rgb(44, 49, 60),        .axis = rgb(110, 118, 132),
    .block_free = rgb(36, 40, 49),     .block_cached = rgb(42, 88, 98),
    .block_shared = rgb(240, 196, 92), .block_pinned = rgb(200, 120, 220),
    .outline_selected = rgb(255, 255, 255),
    .badge_demo = rgb(232, 143, 58),   .badge_random = rgb(196, 110, 232), .warn = rgb(239, 98, 98),
    .tier_host = rgb(112, 212, 158),   .tier_disk = rgb(236, 132, 88)};

const Palette kPresenter{
    .window_bg = rgb(0, 0, 0),         .panel_bg = rgb(10, 11, 14),
    .text = rgb(255, 255, 255),        .text_dim = rgb(196, 204, 216),
    .accent = rgb(110, 195, 255),      .grid = rgb(56, 62, 76),        .axis = rgb(170, 178, 190),
    .block_free = rgb(40, 44, 54),     .block_cached = rgb(52, 108, 120),
    .block_shared = rgb(255, 210, 80), .block_pinned = rgb(220, 140, 240),
    .outline_selected = rgb(255, 255, 255),
    .badge_demo = rgb(255, 160, 60),   .badge_random = rgb(214, 130, 250), .warn = rgb(255, 110, 110),
    .tier_host = rgb(120, 230, 170),   .tier_disk = rgb(255, 145, 95)};
// clang-format on

}  // namespace

const Palette& palette(bool presenter) {
  return presenter ? kPresenter : kCalm;
}

ImU32 sequence_color(int id, float alpha) {
  const float golden = 0.61803398875f;
  float hue = std::fmod(0.57f + golden * static_cast<float>(id < 0 ? 0 : id), 1.0f);
  // Skip the gold band reserved for shared blocks.
  if (hue > 0.10f && hue < 0.17f) hue += 0.08f;
  const float sat = 0.45f + 0.15f * static_cast<float>((id * 7) % 3) / 2.0f;
  const float val = 0.78f + 0.10f * static_cast<float>((id * 5) % 2);
  float r = 0, g = 0, b = 0;
  ImGui::ColorConvertHSVtoRGB(hue, sat, val, r, g, b);
  return ImGui::ColorConvertFloat4ToU32(ImVec4(r, g, b, alpha));
}

ImU32 series_color(int index) {
  static constexpr ImU32 kSeries[] = {rgb(94, 176, 239),  rgb(240, 160, 70),  rgb(110, 200, 140),
                                      rgb(230, 110, 150), rgb(170, 140, 230), rgb(220, 210, 100),
                                      rgb(120, 210, 220), rgb(200, 200, 200)};
  return kSeries[index % (sizeof(kSeries) / sizeof(kSeries[0]))];
}

ImU32 mix_color(ImU32 a, ImU32 b, float t) {
  const ImVec4 x = v4(a), y = v4(b);
  return ImGui::ColorConvertFloat4ToU32(ImVec4(x.x + (y.x - x.x) * t, x.y + (y.y - x.y) * t,
                                               x.z + (y.z - x.z) * t, x.w + (y.w - x.w) * t));
}

void apply_style(bool presenter) {
  const Palette& p = palette(presenter);
  ImGuiStyle style;  // start from defaults each time so toggling never compounds scaling
  style.WindowRounding = 6.0f;
  style.ChildRounding = 4.0f;
  style.FrameRounding = 4.0f;
  style.PopupRounding = 4.0f;
  style.GrabRounding = 4.0f;
  style.TabRounding = 4.0f;
  style.ScrollbarRounding = 6.0f;
  style.WindowBorderSize = 1.0f;
  style.FrameBorderSize = 0.0f;
  style.WindowPadding = ImVec2(10, 8);
  style.FramePadding = ImVec2(8, 4);
  style.ItemSpacing = ImVec2(8, 6);
  style.ItemInnerSpacing = ImVec2(6, 4);
  style.ScrollbarSize = 12.0f;
  style.GrabMinSize = 10.0f;
  style.WindowTitleAlign = ImVec2(0.0f, 0.5f);
  ImVec4* c = style.Colors;
  const ImVec4 accent = v4(p.accent);
  const auto accent_a = [&](float a) { return ImVec4(accent.x, accent.y, accent.z, a); };
  c[ImGuiCol_Text] = v4(p.text);
  c[ImGuiCol_TextDisabled] = v4(p.text_dim);
  c[ImGuiCol_WindowBg] = v4(p.panel_bg);
  c[ImGuiCol_ChildBg] = ImVec4(0, 0, 0, 0);
  c[ImGuiCol_PopupBg] = v4(mix_color(p.panel_bg, IM_COL32_WHITE, 0.04f));
  c[ImGuiCol_Border] = v4(mix_color(p.panel_bg, IM_COL32_WHITE, 0.10f));
  c[ImGuiCol_FrameBg] = v4(mix_color(p.panel_bg, IM_COL32_WHITE, 0.06f));
  c[ImGuiCol_FrameBgHovered] = v4(mix_color(p.panel_bg, IM_COL32_WHITE, 0.11f));
  c[ImGuiCol_FrameBgActive] = v4(mix_color(p.panel_bg, IM_COL32_WHITE, 0.15f));
  c[ImGuiCol_TitleBg] = v4(mix_color(p.window_bg, IM_COL32_WHITE, 0.03f));
  c[ImGuiCol_TitleBgActive] = v4(mix_color(p.window_bg, p.accent, 0.16f));
  c[ImGuiCol_TitleBgCollapsed] = v4(p.window_bg);
  c[ImGuiCol_MenuBarBg] = v4(mix_color(p.window_bg, IM_COL32_WHITE, 0.03f));
  c[ImGuiCol_ScrollbarBg] = ImVec4(0, 0, 0, 0);
  c[ImGuiCol_ScrollbarGrab] = v4(mix_color(p.panel_bg, IM_COL32_WHITE, 0.18f));
  c[ImGuiCol_ScrollbarGrabHovered] = v4(mix_color(p.panel_bg, IM_COL32_WHITE, 0.28f));
  c[ImGuiCol_ScrollbarGrabActive] = accent_a(0.8f);
  c[ImGuiCol_CheckMark] = accent;
  c[ImGuiCol_SliderGrab] = accent_a(0.85f);
  c[ImGuiCol_SliderGrabActive] = accent;
  c[ImGuiCol_Button] = v4(mix_color(p.panel_bg, IM_COL32_WHITE, 0.08f));
  c[ImGuiCol_ButtonHovered] = accent_a(0.35f);
  c[ImGuiCol_ButtonActive] = accent_a(0.55f);
  c[ImGuiCol_Header] = accent_a(0.22f);
  c[ImGuiCol_HeaderHovered] = accent_a(0.32f);
  c[ImGuiCol_HeaderActive] = accent_a(0.45f);
  c[ImGuiCol_Separator] = c[ImGuiCol_Border];
  c[ImGuiCol_Tab] = c[ImGuiCol_Button];
  c[ImGuiCol_TabHovered] = accent_a(0.40f);
  c[ImGuiCol_TabActive] = accent_a(0.30f);
  c[ImGuiCol_TableHeaderBg] = v4(mix_color(p.panel_bg, IM_COL32_WHITE, 0.05f));
  c[ImGuiCol_TableBorderStrong] = c[ImGuiCol_Border];
  c[ImGuiCol_TableBorderLight] = v4(mix_color(p.panel_bg, IM_COL32_WHITE, 0.06f));
  c[ImGuiCol_TableRowBgAlt] = ImVec4(1, 1, 1, 0.025f);
  c[ImGuiCol_ModalWindowDimBg] = ImVec4(0, 0, 0, 0.55f);
  if (presenter) {
    style.ScaleAllSizes(1.5f);
    style.WindowBorderSize = 2.0f;
  }
  ImGui::GetStyle() = style;
}

Fonts load_fonts(ImGuiIO& io) {
  Fonts fonts;
  static const char* const kCandidates[] = {
      KVSCOPE_SOURCE_DIR "/assets/fonts/kvscope-ui.ttf",
      "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
      "/usr/share/fonts/TTF/DejaVuSans.ttf",
      "/usr/share/fonts/dejavu/DejaVuSans.ttf",
  };
  for (const char* path : kCandidates) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) continue;
    ImFontConfig cfg;
    cfg.OversampleH = 2;
    fonts.normal = io.Fonts->AddFontFromFileTTF(path, 15.0f, &cfg);
    fonts.large = io.Fonts->AddFontFromFileTTF(path, 24.0f, &cfg);
    if (fonts.normal && fonts.large) {
      fonts.from_system = true;
      return fonts;
    }
  }
  fonts.normal = fonts.large = io.Fonts->AddFontDefault();
  return fonts;
}

void use_fonts(const Fonts& fonts, bool presenter) {
  ImGuiIO& io = ImGui::GetIO();
  io.FontDefault = presenter ? fonts.large : fonts.normal;
  io.FontGlobalScale = (!fonts.from_system && presenter) ? 1.6f : 1.0f;
}

}  // namespace kvscope::ui

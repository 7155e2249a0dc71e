// Workspace layouts per window size and the panels' legible minimums (see shell_layout.h).
#include "app/core/shell_layout.h"

#include <algorithm>
#include <cmath>
#include <string_view>

namespace kvscope::ui {

const std::vector<Workspace>& workspaces() {
  // Each list runs from the full layout (a 1600x1000 or larger window, normal fonts) down to one
  // or two panels (a 720p projector in presenter mode): the lesson's main panel stays, the
  // supporting ones go first.
  static const std::vector<Workspace> kAll = {
      {"Pool",
       "Ctrl+1",
       {{{{"Block pool", 0.0f, 0.0f, 0.6f, 0.58f},
          {"Fragmentation", 0.0f, 0.58f, 0.6f, 0.42f},
          {"Block tables", 0.6f, 0.0f, 0.4f, 0.26f},
          {"Text", 0.6f, 0.26f, 0.4f, 0.26f},
          {"Memory vs context", 0.6f, 0.52f, 0.4f, 0.48f}}},
        {{{"Block pool", 0.0f, 0.0f, 0.6f, 0.56f},
          {"Fragmentation", 0.0f, 0.56f, 0.6f, 0.44f},
          {"Block tables", 0.6f, 0.0f, 0.4f, 0.5f},
          {"Text", 0.6f, 0.5f, 0.4f, 0.5f}}},
        {{{"Block pool", 0.0f, 0.0f, 0.58f, 1.0f}, {"Block tables", 0.58f, 0.0f, 0.42f, 1.0f}}},
        {{{"Block pool", 0.0f, 0.0f, 1.0f, 1.0f}}}}},
      {"Prefix",
       "Ctrl+2",
       {{{{"Prefix cache", 0.0f, 0.0f, 0.62f, 0.6f},
          {"Text", 0.0f, 0.6f, 0.62f, 0.4f},
          {"Block pool", 0.62f, 0.0f, 0.38f, 0.5f},
          {"Controls", 0.62f, 0.5f, 0.38f, 0.5f}}},
        {{{"Prefix cache", 0.0f, 0.0f, 0.6f, 1.0f},
          {"Block pool", 0.6f, 0.0f, 0.4f, 0.5f},
          {"Text", 0.6f, 0.5f, 0.4f, 0.5f}}},
        {{{"Prefix cache", 0.0f, 0.0f, 0.6f, 1.0f}, {"Block pool", 0.6f, 0.0f, 0.4f, 1.0f}}},
        {{{"Prefix cache", 0.0f, 0.0f, 1.0f, 1.0f}}}}},
      {"Attention & quality",
       "Ctrl+3",
       {{{{"Attention", 0.0f, 0.0f, 0.45f, 1.0f},
          {"Quality vs memory", 0.45f, 0.0f, 0.55f, 0.56f},
          {"Text", 0.45f, 0.56f, 0.3f, 0.44f},
          {"Controls", 0.75f, 0.56f, 0.25f, 0.44f}}},
        {{{"Attention", 0.0f, 0.0f, 0.5f, 1.0f},
          {"Quality vs memory", 0.5f, 0.0f, 0.5f, 0.6f},
          {"Controls", 0.5f, 0.6f, 0.5f, 0.4f}}},
        {{{"Attention", 0.0f, 0.0f, 0.5f, 1.0f}, {"Quality vs memory", 0.5f, 0.0f, 0.5f, 1.0f}}},
        {{{"Attention", 0.0f, 0.0f, 1.0f, 1.0f}}}}},
      {"Compare",
       "Ctrl+4",
       {{{{"Compare", 0.0f, 0.0f, 0.62f, 1.0f},
          {"Controls", 0.62f, 0.0f, 0.38f, 0.5f},
          {"Fragmentation", 0.62f, 0.5f, 0.38f, 0.5f}}},
        {{{"Compare", 0.0f, 0.0f, 0.62f, 1.0f}, {"Controls", 0.62f, 0.0f, 0.38f, 1.0f}}},
        {{{"Compare", 0.0f, 0.0f, 1.0f, 1.0f}}}}},
      {"Live",
       "Ctrl+5",
       {{{{"Live attach", 0.0f, 0.0f, 0.56f, 1.0f},
          {"Prefix cache", 0.56f, 0.0f, 0.44f, 0.58f},
          {"Block pool", 0.56f, 0.58f, 0.44f, 0.42f}}},
        {{{"Live attach", 0.0f, 0.0f, 0.5f, 1.0f}, {"Prefix cache", 0.5f, 0.0f, 0.5f, 1.0f}}},
        {{{"Live attach", 0.0f, 0.0f, 1.0f, 1.0f}}}}},
      {"Kernel",
       "Ctrl+6",
       {{{{"Kernel", 0.0f, 0.0f, 0.6f, 1.0f},
          {"Block pool", 0.6f, 0.0f, 0.4f, 0.56f},
          {"Block tables", 0.6f, 0.56f, 0.4f, 0.44f}}},
        {{{"Kernel", 0.0f, 0.0f, 0.6f, 1.0f}, {"Block pool", 0.6f, 0.0f, 0.4f, 1.0f}}},
        {{{"Kernel", 0.0f, 0.0f, 1.0f, 1.0f}}}}},
      {"Serving",
       "Ctrl+7",
       {{{{"Prefill/decode", 0.0f, 0.0f, 0.62f, 1.0f}, {"Block pool", 0.62f, 0.0f, 0.38f, 1.0f}}},
        {{{"Prefill/decode", 0.0f, 0.0f, 1.0f, 1.0f}}}}},
  };
  return kAll;
}

LegibleMinimum legible_minimum(std::string_view panel) {
  // lines x ems of content, and whether the panel may scroll. Plots need kMinPlotLines plus their
  // panel's controls above them; tables a header and kMinTableRows rows plus their filters.
  struct Entry {
    std::string_view panel;
    LegibleMinimum min;
  };
  static constexpr Entry kMinimums[] = {
      {"Block pool", {11.0f, 26.0f, false}},
      {"Block tables", {6.5f, 20.0f, false}},
      {"Fragmentation", {11.0f, 48.0f, false}},
      {"Memory vs context", {16.0f, 34.0f, false}},
      {"Text", {6.0f, 26.0f, true}},
      {"Prefix cache", {12.0f, 34.0f, true}},
      {"Controls", {8.0f, 24.0f, true}},
      {"Attention", {14.0f, 34.0f, true}},
      {"Quality vs memory", {14.0f, 32.0f, true}},
      {"Compare", {14.0f, 40.0f, true}},
      {"Live attach", {10.0f, 34.0f, true}},
      {"Kernel", {14.0f, 34.0f, true}},
      {"Prefill/decode", {13.0f, 40.0f, true}},
  };
  for (const Entry& e : kMinimums)
    if (e.panel == panel) return e.min;
  return {};
}

ImVec2 slot_content_size(const Slot& slot, ImVec2 area) {
  const ImGuiStyle& style = ImGui::GetStyle();
  const float title = ImGui::GetFontSize() + style.FramePadding.y * 2.0f;
  const float w = std::floor(slot.w * area.x - kLayoutMargin) - style.WindowPadding.x * 2.0f;
  const float h =
      std::floor(slot.h * area.y - kLayoutMargin) - title - style.WindowPadding.y * 2.0f;
  return ImVec2(w, h);
}

bool slot_fits(const Slot& slot, ImVec2 area) {
  const LegibleMinimum min = legible_minimum(slot.panel);
  const ImVec2 content = slot_content_size(slot, area);
  return content.y >= min.lines * ImGui::GetTextLineHeightWithSpacing() &&
         content.x >= min.ems * ImGui::GetFontSize();
}

int choose_layout(const Workspace& workspace, ImVec2 area) {
  const int n = static_cast<int>(workspace.layouts.size());
  for (int i = 0; i < n; ++i) {
    const Layout& layout = workspace.layouts[static_cast<std::size_t>(i)];
    if (std::all_of(layout.slots.begin(), layout.slots.end(),
                    [&](const Slot& s) { return slot_fits(s, area); }))
      return i;
  }
  return n - 1;
}

}  // namespace kvscope::ui

// Transport bar and its keyboard shortcuts.
#include "app/core/transport.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "app/core/theme.h"
#include "app/widgets/widgets.h"

namespace kvscope::ui {

namespace {

// A scrubber track: usage sparkline, preemption ticks, the playhead; click or drag to seek.
void scrubber(AppState& state, float width, float height) {
  const ImVec2 a = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton("##scrub", ImVec2(std::max(width, 40.0f), height));
  const ImVec2 b = ImGui::GetItemRectMax();
  const bool hovered = ImGui::IsItemHovered();
  const Palette& pal = palette(state.presenter);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRectFilled(a, b, mix_color(pal.panel_bg, IM_COL32_BLACK, 0.35f), 4.0f);
  const std::span<const StepMetrics> ms = state.metrics_history();
  const int n = static_cast<int>(ms.size());
  const float w = b.x - a.x;
  const auto x_of = [&](int step) { return a.x + (n <= 1 ? 0.0f : w * step / (n - 1.0f)); };
  // One column per pixel: the highest usage among the steps that land on it.
  const int cols = std::max(1, static_cast<int>(w));
  std::vector<float> peak(static_cast<std::size_t>(cols), 0.0f);
  std::int64_t last_preempt = n > 0 ? ms[0].preemptions : 0;
  for (int s = 0; s < n; ++s) {
    const StepMetrics& m = ms[s];
    const int c = std::clamp(static_cast<int>((x_of(s) - a.x)), 0, cols - 1);
    const float u = m.blocks_total > 0 ? static_cast<float>(m.blocks_used) / m.blocks_total : 0.0f;
    peak[c] = std::max(peak[c], u);
    if (m.preemptions > last_preempt) {
      dl->AddLine(ImVec2(x_of(s), a.y), ImVec2(x_of(s), a.y + 4.0f), pal.warn, 1.5f);
    }
    last_preempt = m.preemptions;
  }
  const ImU32 played = mix_color(pal.accent, pal.panel_bg, 0.35f);
  const ImU32 ahead = mix_color(pal.accent, pal.panel_bg, 0.72f);
  const float x_now = x_of(state.step());
  const auto bar = [&](float x0, float x1, float u) {
    const float top = b.y - 2.0f - (height - 6.0f) * u;
    dl->AddRectFilled(ImVec2(x0, top), ImVec2(x1, b.y - 2.0f), x0 < x_now ? played : ahead);
  };
  if (n < cols) {  // fewer steps than pixels: one bar per step
    for (int s = 0; s < n; ++s) {
      const StepMetrics& m = ms[s];
      const float u =
          m.blocks_total > 0 ? static_cast<float>(m.blocks_used) / m.blocks_total : 0.0f;
      bar(x_of(s), s + 1 < n ? x_of(s + 1) : b.x, u);
    }
  } else {
    for (int c = 0; c < cols; ++c) bar(a.x + c, a.x + c + 1.0f, peak[c]);
  }
  dl->AddLine(ImVec2(x_now, a.y - 1.0f), ImVec2(x_now, b.y + 1.0f), pal.text, 2.0f);
  dl->AddCircleFilled(ImVec2(x_now, a.y), 4.0f, pal.text);
  if (hovered && n > 1) {
    const float mx = ImGui::GetIO().MousePos.x;
    const int s = std::clamp(static_cast<int>((mx - a.x) / w * (n - 1) + 0.5f), 0, n - 1);
    dl->AddLine(ImVec2(mx, a.y), ImVec2(mx, b.y), IM_COL32(255, 255, 255, 60));
    ImGui::BeginTooltip();
    ImGui::Text("step %d", s);
    ImGui::TextDisabled("%d / %d blocks used, %d running, %d waiting", ms[s].blocks_used,
                        ms[s].blocks_total, ms[s].requests_running, ms[s].requests_waiting);
    ImGui::TextDisabled("click or drag to seek [Home / End, Left / Right]");
    ImGui::EndTooltip();
  }
  if (ImGui::IsItemActive() && n > 1) {
    const float mx = ImGui::GetIO().MousePos.x;
    state.set_step(static_cast<int>((mx - a.x) / w * (n - 1) + 0.5f));
  }
}

}  // namespace

void draw_transport(AppState& state) {
  const float size = ImGui::GetFrameHeight();
  ImGui::PushStyleVar(ImGuiStyleVar_ItemSpacing, ImVec2(4.0f, 4.0f));
  if (icon_button("##start", Icon::kToStart, size)) state.set_step(0);
  item_tooltip("Go to the first step", "Home");
  ImGui::SameLine();
  if (icon_button("##back", Icon::kStepBack, size)) state.step_by(-1);
  item_tooltip("Step back (Shift: 10 steps)", "Left");
  ImGui::SameLine();
  if (icon_button("##play", state.playing ? Icon::kPause : Icon::kPlay, size)) state.toggle_play();
  item_tooltip(state.playing ? "Pause" : "Play", "Space");
  ImGui::SameLine();
  if (icon_button("##fwd", Icon::kStepForward, size)) state.step_by(1);
  item_tooltip("Step forward (Shift: 10 steps)", "Right");
  ImGui::SameLine();
  if (icon_button("##end", Icon::kToEnd, size)) state.set_step(state.num_steps() - 1);
  item_tooltip("Go to the last step", "End");
  ImGui::PopStyleVar();
  ImGui::SameLine(0, 12);
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 7.0f);
  ImGui::SliderFloat("##speed", &state.speed, 1.0f, 120.0f, "%.0f steps/s",
                     ImGuiSliderFlags_Logarithmic);
  item_tooltip("Playback speed");
  ImGui::SameLine(0, 12);
  char label[64];
  std::snprintf(label, sizeof label, "step %d / %d", state.step(), state.num_steps() - 1);
  const float label_w = ImGui::CalcTextSize("step 00000 / 00000").x;
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted(label);
  ImGui::SameLine(0, 0);
  ImGui::Dummy(ImVec2(std::max(0.0f, label_w - ImGui::CalcTextSize(label).x), 1.0f));
  ImGui::SameLine(0, 12);
  if (state.is_live()) {  // the Simulator is still appending steps on its worker
    const Palette& pal = palette(state.presenter);
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(state.follow_live ? pal.accent : pal.warn),
                       "%s", state.follow_live ? "LIVE" : "computing");
    item_tooltip(state.follow_live ? "Following the newest step as the Simulator computes it"
                                   : "The Simulator is still running; play or End to follow it");
    ImGui::SameLine(0, 12);
  }
  scrubber(state, ImGui::GetContentRegionAvail().x, size);
}

bool handle_transport_keys(AppState& state) {
  const ImGuiIO& io = ImGui::GetIO();
  if (io.WantTextInput) return false;
  const int stride = io.KeyShift ? 10 : 1;
  if (key_pressed(ImGuiKey_Space))
    state.toggle_play();
  else if (key_pressed(ImGuiKey_LeftArrow))
    state.step_by(-stride);
  else if (key_pressed(ImGuiKey_RightArrow))
    state.step_by(stride);
  else if (key_pressed(ImGuiKey_Home))
    state.set_step(0);
  else if (key_pressed(ImGuiKey_End))
    state.set_step(state.num_steps() - 1);
  else
    return false;
  return true;
}

}  // namespace kvscope::ui

// Small shared widgets drawn with ImGui items and draw lists.
#include "app/widgets/widgets.h"

#include <cmath>
#include <cstdio>

#include "app/core/theme.h"

namespace kvscope::ui {

void help_marker(const std::string& text, const std::string& docs_page) {
  ImGui::TextDisabled("(?)");
  if (ImGui::IsItemHovered()) {
    ImGui::BeginTooltip();
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 28.0f);
    ImGui::TextUnformatted(text.c_str());
    ImGui::Spacing();
    ImGui::TextDisabled("Read more: %s", docs_page.c_str());
    ImGui::PopTextWrapPos();
    ImGui::EndTooltip();
  }
}

void item_tooltip(const char* text, const char* shortcut) {
  if (!ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled)) return;
  ImGui::BeginTooltip();
  ImGui::TextUnformatted(text);
  if (shortcut != nullptr) {
    ImGui::SameLine();
    ImGui::TextDisabled("[%s]", shortcut);
  }
  ImGui::EndTooltip();
}

bool icon_button(const char* id, Icon icon, float size) {
  const bool clicked = ImGui::Button(id, ImVec2(size, size));
  const ImVec2 lo = ImGui::GetItemRectMin(), hi = ImGui::GetItemRectMax();
  const ImVec2 c((lo.x + hi.x) * 0.5f, (lo.y + hi.y) * 0.5f);
  const float r = size * 0.22f;
  const ImU32 col = ImGui::GetColorU32(ImGuiCol_Text);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const auto tri_right = [&](float x, float w) {
    dl->AddTriangleFilled(ImVec2(x, c.y - r), ImVec2(x, c.y + r), ImVec2(x + w, c.y), col);
  };
  const auto tri_left = [&](float x, float w) {
    dl->AddTriangleFilled(ImVec2(x, c.y - r), ImVec2(x - w, c.y), ImVec2(x, c.y + r), col);
  };
  const auto bar = [&](float x) {
    dl->AddRectFilled(ImVec2(x, c.y - r), ImVec2(x + r * 0.38f, c.y + r), col);
  };
  switch (icon) {
    case Icon::kPlay:
      tri_right(c.x - r * 0.7f, r * 1.7f);
      break;
    case Icon::kPause:
      bar(c.x - r * 0.65f);
      bar(c.x + r * 0.27f);
      break;
    case Icon::kStepForward:
      tri_right(c.x - r * 0.8f, r * 1.3f);
      bar(c.x + r * 0.55f);
      break;
    case Icon::kStepBack:
      tri_left(c.x + r * 0.8f, r * 1.3f);
      bar(c.x - r * 0.93f);
      break;
    case Icon::kToEnd:
      tri_right(c.x - r * 1.1f, r * 1.0f);
      tri_right(c.x - r * 0.1f, r * 1.0f);
      bar(c.x + r * 0.9f);
      break;
    case Icon::kToStart:
      tri_left(c.x + r * 1.1f, r * 1.0f);
      tri_left(c.x + r * 0.1f, r * 1.0f);
      bar(c.x - r * 1.28f);
      break;
  }
  return clicked;
}

void badge(const char* text, ImU32 color) {
  const ImVec2 pad(6.0f, 1.0f);
  const ImVec2 ts = ImGui::CalcTextSize(text);
  const ImVec2 pos = ImGui::GetCursorScreenPos();
  const float frame_h = ImGui::GetFrameHeight();
  const float top = pos.y + (frame_h - ts.y) * 0.5f - pad.y;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRectFilled(ImVec2(pos.x, top), ImVec2(pos.x + ts.x + 2 * pad.x, top + ts.y + 2 * pad.y),
                    color, 4.0f);
  dl->AddText(ImVec2(pos.x + pad.x, top + pad.y), IM_COL32(16, 16, 20, 255), text);
  ImGui::Dummy(ImVec2(ts.x + 2 * pad.x, frame_h));
}

namespace {

float default_swatch_size() {
  return ImGui::GetTextLineHeight() * 0.8f;
}

}  // namespace

void swatch(ImU32 color, float size) {
  if (size <= 0.0f) size = default_swatch_size();
  const ImVec2 pos = ImGui::GetCursorScreenPos();
  const float dy = (ImGui::GetTextLineHeight() - size) * 0.5f;
  ImGui::GetWindowDrawList()->AddRectFilled(ImVec2(pos.x, pos.y + dy),
                                            ImVec2(pos.x + size, pos.y + dy + size), color, 2.0f);
  ImGui::Dummy(ImVec2(size, ImGui::GetTextLineHeight()));
}

bool flow_same_line(float width, float spacing) {
  const float right = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
  if (ImGui::GetItemRectMax().x + spacing + width > right) return false;
  ImGui::SameLine(0.0f, spacing);
  return true;
}

float check_width(const char* label) {
  return ImGui::GetFrameHeight() + ImGui::GetStyle().ItemInnerSpacing.x +
         ImGui::CalcTextSize(label, nullptr, true).x;
}

float labeled_width(float frame_width, const char* label) {
  const float text = ImGui::CalcTextSize(label, nullptr, true).x;
  return frame_width + (text > 0.0f ? ImGui::GetStyle().ItemInnerSpacing.x + text : 0.0f);
}

float swatch_label_width(const char* label) {
  return default_swatch_size() + 4.0f + ImGui::CalcTextSize(label).x;
}

void stat(const char* label, const std::string& value, bool flow) {
  if (flow)
    flow_same_line(ImGui::CalcTextSize(label).x + 4.0f + ImGui::CalcTextSize(value.c_str()).x,
                   16.0f);
  ImGui::TextDisabled("%s", label);
  ImGui::SameLine(0.0f, 4.0f);
  ImGui::TextUnformatted(value.c_str());
}

std::string format_bytes(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024.0 && u < 5) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : (bytes < 10 ? "%.2f %s" : "%.1f %s"), bytes,
                kUnits[u]);
  return buf;
}

std::string format_count(double n) {
  char buf[32];
  const double a = std::fabs(n);
  if (a >= 1e9)
    std::snprintf(buf, sizeof buf, "%.3gG", n / 1e9);
  else if (a >= 1e6)
    std::snprintf(buf, sizeof buf, "%.3gM", n / 1e6);
  else if (a >= 1e4)
    std::snprintf(buf, sizeof buf, "%.3gk", n / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

std::string format_percent(double fraction, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f%%", decimals, fraction * 100.0);
  return buf;
}

void warning_text(const std::string& text, bool presenter) {
  ImGui::PushStyleColor(ImGuiCol_Text, palette(presenter).warn);
  ImGui::TextWrapped("%s", text.c_str());
  ImGui::PopStyleColor();
}

}  // namespace kvscope::ui

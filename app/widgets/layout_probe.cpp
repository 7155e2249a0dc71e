// Layout probe records (see layout_probe.h).
#include "app/widgets/layout_probe.h"

#include <imgui_internal.h>

#include <vector>

namespace kvscope::ui {

namespace {

// One probe per process: the UI draws on one thread, and only tests turn it on.
struct Probe {
  bool on = false;
  std::vector<ProbeRecord> records;
};

Probe& probe() {
  static Probe p;
  return p;
}

}  // namespace

void probe_enable(bool on) {
  probe().on = on;
  probe().records.clear();
}

bool probe_enabled() {
  return probe().on;
}

void probe_clear() {
  probe().records.clear();
}

void probe_record(ProbeKind kind, const std::string& what, ImVec2 min, ImVec2 max, ImVec2 inner_min,
                  ImVec2 inner_max) {
  if (!probe().on) return;
  ProbeRecord r;
  r.kind = kind;
  const ImGuiWindow* w = ImGui::GetCurrentWindowRead();
  r.window = w != nullptr && w->RootWindow != nullptr ? w->RootWindow->Name : "";
  r.what = what;
  r.min = min;
  r.max = max;
  r.inner_min = inner_min;
  r.inner_max = inner_max;
  r.line_height = ImGui::GetTextLineHeight();
  r.font_size = ImGui::GetFontSize();
  probe().records.push_back(std::move(r));
}

std::span<const ProbeRecord> probe_records() {
  return probe().records;
}

}  // namespace kvscope::ui

// Fragmentation panel: current figures on one line, then three plots over the steps of the run.
#include "app/panels/fragmentation_panel.h"

#include <algorithm>

#include "app/core/theme.h"
#include "app/widgets/widgets.h"

namespace kvscope::ui {

std::string FragmentationPanel::help() const {
  return "Internal fragmentation is the empty slots inside allocated blocks (paging wastes at "
         "most one partial block per sequence); reservation waste is memory a contiguous "
         "allocator reserves for tokens that never come. External fragmentation is free memory "
         "split into runs too small to use: 1 - largest free run / free blocks.";
}

void FragmentationPanel::rebuild_series(const AppState& state) {
  const std::span<const StepMetrics> ms = state.metrics_history();
  if (ms.data() == built_for_ && ms.size() == built_size_) return;
  built_for_ = ms.data();
  built_size_ = ms.size();
  const auto make = [&](const char* label, auto value, bool fill) {
    PlotSeries s;
    s.label = label;
    s.fill = fill;
    s.x.reserve(ms.size());
    s.y.reserve(ms.size());
    for (const StepMetrics& m : ms) {
      s.x.push_back(m.step);
      s.y.push_back(static_cast<double>(value(m)));
    }
    return s;
  };
  slots_ = {make(
                "allocated slots", [](const StepMetrics& m) { return m.slots_allocated; }, true),
            make(
                "tokens", [](const StepMetrics& m) { return m.slots_filled; }, true)};
  waste_ = {make(
                "internal fragmentation",
                [](const StepMetrics& m) { return m.internal_frag_slots; }, true),
            make(
                "reservation waste", [](const StepMetrics& m) { return m.reservation_waste_slots; },
                false)};
  free_ = {make(
               "free blocks", [](const StepMetrics& m) { return m.free_blocks; }, true),
           make(
               "largest free run", [](const StepMetrics& m) { return m.largest_free_run; }, false),
           make(
               "cached free", [](const StepMetrics& m) { return m.blocks_cached_free; }, false)};
  waste_[0].color = series_color(3);
  waste_[1].color = series_color(1);
  free_[0].color = series_color(2);
  free_[1].color = series_color(5);
  free_[2].color = series_color(6);
}

void FragmentationPanel::draw(AppState& state) {
  rebuild_series(state);
  const StepMetrics& m = state.metrics();
  const double slots = static_cast<double>(m.slots_allocated);
  stat("token occupancy", format_percent(m.utilization()));
  stat("internal",
       format_count(static_cast<double>(m.internal_frag_slots)) + " slots (" +
           format_percent(slots > 0 ? m.internal_frag_slots / slots : 0.0) + ")",
       true);
  stat("reservation waste", format_count(static_cast<double>(m.reservation_waste_slots)) + " slots",
       true);
  stat("largest free run",
       std::to_string(m.largest_free_run) + " / " + std::to_string(m.free_blocks) + " free", true);
  stat("external", format_percent(m.external_fragmentation()), true);
  if (!export_message_.empty()) {
    ImGui::SameLine(0, 16);
    ImGui::TextDisabled("%s", export_message_.c_str());
  }

  const float line_scale = state.presenter ? 1.6f : 1.0f;
  const float h = ImGui::GetContentRegionAvail().y;
  if (!ImGui::BeginTable("##frag", 3, ImGuiTableFlags_SizingStretchSame)) return;
  const auto cell = [&](const char* id, const char* title, const char* y_label,
                        std::vector<PlotSeries>& series) {
    ImGui::TableNextColumn();
    PlotConfig cfg;
    cfg.id = id;
    cfg.title = title;
    cfg.x.label = "step";
    cfg.y.label = y_label;
    cfg.size = ImVec2(-1.0f, std::max(h - 4.0f, 120.0f));
    cfg.cursor_x = state.step();
    cfg.line_scale = line_scale;
    const PlotResult r = plot(cfg, series);
    if (r.clicked || (r.hovered && ImGui::IsMouseDragging(ImGuiMouseButton_Left))) {
      state.set_step(static_cast<int>(r.mouse_x + 0.5));
    }
    if (!r.exported.empty()) export_message_ = r.exported;
  };
  cell("frag_slots", "Occupancy", "token slots", slots_);
  cell("frag_waste", "Waste", "empty slots", waste_);
  cell("frag_free", "Free space", "blocks", free_);
  ImGui::EndTable();
}

}  // namespace kvscope::ui

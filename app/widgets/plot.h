// A reusable plot widget on ImGui draw lists: axes with nice ticks and labels, a legend, line and
// marker series, linear or log scales, labelled reference lines, a step cursor, a hover read-out of
// the nearest point, click-to-pick an x value, and CSV export of the plotted data (right-click).
#pragma once

#include <imgui.h>

#include <cmath>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvscope::ui {

enum class AxisUnits { kNumber, kBytes, kTokens, kPercent };

struct PlotAxis {
  std::string label;
  AxisUnits units = AxisUnits::kNumber;
  bool log = false;
  std::optional<double> min, max;  // fixed range; data range (linear: from 0) when unset
};

struct PlotSeries {
  std::string label;
  std::vector<double> x, y;  // same length; x ascending for best hover/decimation
  ImU32 color = 0;           // 0: the series palette by index
  bool line = true;
  bool markers = false;
  bool fill = false;  // shade the area under a line (linear y only)
  float thickness = 2.0f;
  float marker_radius = 3.0f;             // before line_scale
  ImU32 marker_outline = 0;               // a ring around each marker (measured points stand out)
  bool in_legend = true;                  // false: drawn and hovered, but left out of the legend
  std::vector<std::string> point_labels;  // optional, one per point: drawn beside its marker
};

struct PlotRefLine {
  double value = 0.0;
  std::string label;
  ImU32 color = 0;           // 0: dimmed text colour
  bool vertical = false;     // at x = value instead of y = value
  bool label_below = false;  // put the label under the line (for lines close together)
};

struct PlotConfig {
  const char* id = "plot";
  std::string title;
  PlotAxis x, y;
  std::string y_short_label;   // shown instead of y.label where that does not fit the plot
  ImVec2 size{-1.0f, 220.0f};  // <= 0: fill the available width/height
  double cursor_x = NAN;       // vertical marker (e.g. the selected step), NaN for none
  bool legend = true;
  float line_scale = 1.0f;  // presenter mode draws thicker lines
};

struct PlotResult {
  bool hovered = false;
  bool clicked = false;                 // left click inside the plot area
  double mouse_x = 0.0, mouse_y = 0.0;  // in data units, valid when hovered
  std::string exported;                 // a one-line message after a CSV export (path or error)
};

PlotResult plot(const PlotConfig& config, std::span<const PlotSeries> series,
                std::span<const PlotRefLine> refs = {});

// Axis helpers (plot_axis.cpp), exposed for tests.
std::vector<double> linear_ticks(double lo, double hi, int max_ticks);
// Log ticks: decades for plain numbers, powers of 4 (or 2) for bytes and tokens.
std::vector<double> log_ticks(double lo, double hi, AxisUnits units);
std::string format_tick(double value, AxisUnits units);
// Long-format CSV ("series,x,y" rows) of exactly the plotted data.
std::string plot_csv(std::span<const PlotSeries> series, const std::string& x_label,
                     const std::string& y_label);

}  // namespace kvscope::ui

// Layout probe: widgets note where their content landed and what they had to shorten, so the
// headless layout test can check legibility from ImGui's own rectangles instead of pixels. Off
// (one branch per call) unless a test turns it on.
#pragma once

#include <imgui.h>

#include <span>
#include <string>

namespace kvscope::ui {

enum class ProbeKind {
  kPlot,     // a plot's whole box (rect) and its data area (inner)
  kTable,    // a table's visible box; rows = body rows that fit under the header
  kTextCut,  // text shortened or dropped to fit (an ellipsized axis title, a dropped legend)
  kNoRoom,   // a widget that drew "enlarge the panel" instead of its content
};

struct ProbeRecord {
  ProbeKind kind = ProbeKind::kPlot;
  std::string window;           // the root window's name (a panel: "<shown title>###<title>")
  std::string what;             // the widget's id and, for kTextCut, what was cut
  ImVec2 min, max;              // the item's rectangle, screen pixels
  ImVec2 inner_min, inner_max;  // a plot's data area
  float line_height = 0.0f;     // the text line height in force when it was recorded
  float font_size = 0.0f;
};

// Turns recording on or off and clears what was recorded (tests call it before a frame).
void probe_enable(bool on);
bool probe_enabled();
// Clears the records (the shell calls it at the start of every frame).
void probe_clear();
// Records an item in the current window; no-op when the probe is off.
void probe_record(ProbeKind kind, const std::string& what, ImVec2 min, ImVec2 max,
                  ImVec2 inner_min = {}, ImVec2 inner_max = {});
std::span<const ProbeRecord> probe_records();

}  // namespace kvscope::ui

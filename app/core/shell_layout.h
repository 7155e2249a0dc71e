// Workspace layouts that fit the window. Each workspace lists its layouts from the most panels to
// the fewest; the shell shows the first one in which every panel gets its legible minimum (in
// text lines and font widths, so presenter fonts count) at the window's size. Panels a layout
// leaves out stay one click away in the View menu. The minimums live here, in one table, and the
// layout test checks the drawn panels against them.
#pragma once

#include <imgui.h>

#include <string_view>
#include <vector>

namespace kvscope::ui {

// A panel's place in a layout, as fractions of the area under the transport bar.
struct Slot {
  const char* panel;
  float x, y, w, h;
};
struct Layout {
  std::vector<Slot> slots;
};
struct Workspace {
  const char* name;
  const char* key;              // shortcut shown in the menu
  std::vector<Layout> layouts;  // most panels first; the last one is the fallback
};

const std::vector<Workspace>& workspaces();

// The smallest content area (inside the window's padding, under its title bar) at which a panel
// still shows its lesson: `lines` text lines (with spacing) tall and `ems` font sizes wide.
struct LegibleMinimum {
  float lines = 8.0f;
  float ems = 24.0f;
  bool may_scroll = true;  // false: its lesson must show whole, without a vertical scrollbar
};
LegibleMinimum legible_minimum(std::string_view panel);

// Inside panels: a plot's box at least this many text lines tall and font sizes wide, a table its
// header plus this many rows.
inline constexpr float kMinPlotLines = 8.0f;
inline constexpr float kMinPlotEms = 14.0f;
inline constexpr int kMinTableRows = 3;

// What a slot of a layout offers: its window's content size in pixels for an area of `area`
// pixels under the transport bar, with the current style and font.
ImVec2 slot_content_size(const Slot& slot, ImVec2 area);
// Whether a slot's content meets its panel's minimum in `area` with the current style and font.
bool slot_fits(const Slot& slot, ImVec2 area);
// The first layout of `workspace` whose every slot fits `area` (the last one when none does).
int choose_layout(const Workspace& workspace, ImVec2 area);

// The gap between panel windows and around them, in pixels.
inline constexpr float kLayoutMargin = 6.0f;

}  // namespace kvscope::ui

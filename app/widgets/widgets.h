// Small shared widgets: the (?) concept help marker, tooltips with shortcuts, drawn icon buttons,
// badges and colour swatches. Stateless: every call draws from its arguments.
#pragma once

#include <imgui.h>

#include <string>

namespace kvscope::ui {

// "(?)" that shows `text` (two sentences on the concept) and the docs page in a tooltip.
void help_marker(const std::string& text, const std::string& docs_page);

// Tooltip for the last item: a description and, if given, its keyboard shortcut.
void item_tooltip(const char* text, const char* shortcut = nullptr);

// Whether a named key went down this frame (with key repeat), as ImGui 1.86 maps it.
inline bool key_pressed(ImGuiKey key) {
  return ImGui::IsKeyPressed(ImGui::GetKeyIndex(key));
}

enum class Icon { kToStart, kStepBack, kPlay, kPause, kStepForward, kToEnd };
// A square button with a vector icon; returns true when clicked.
bool icon_button(const char* id, Icon icon, float size);

// A rounded label with a coloured background (e.g. "DEMO DATA").
void badge(const char* text, ImU32 color);

// `text` wrapped to the window in the palette's warning colour (a background job's error).
void warning_text(const std::string& text, bool presenter);

// A small filled square in `color`, aligned with text.
void swatch(ImU32 color, float size = 0.0f);

// Continues the last item's line (SameLine with `spacing`) when `width` more pixels fit before
// the window's visible right edge; otherwise leaves the next item to start a new line. Returns
// whether it stayed on the line. For rows of legend entries, checkboxes and radio buttons that
// must wrap rather than be cut in narrow windows and presenter fonts.
bool flow_same_line(float width, float spacing = 14.0f);
// The width of a checkbox or radio button with `label` (box, gap, text).
float check_width(const char* label);
// The width of a framed widget (slider, combo) `frame_width` wide followed by its `label`
// (the part before any "##").
float labeled_width(float frame_width, const char* label);
// The width of swatch() followed by a 4-pixel gap and `label`.
float swatch_label_width(const char* label);

// "label value" with the label dimmed. With `flow`, it continues the previous item's line when it
// fits and wraps to a new line when it does not.
void stat(const char* label, const std::string& value, bool flow = false);

// Human-readable figures: 1.5 KiB / 3.2 GiB, 12.3k, 45.6%.
std::string format_bytes(double bytes);
std::string format_count(double n);
std::string format_percent(double fraction, int decimals = 1);

}  // namespace kvscope::ui

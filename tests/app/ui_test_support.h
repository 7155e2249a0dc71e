// Helpers for the headless UI tests: what is being drawn (for assertion messages) and a frame
// wrapper that turns ImGui's recoverable errors (missing End/Pop) into test failures.
#pragma once

#include <imgui.h>

#include <functional>
#include <string>

#include "app/core/app_state.h"
#include "app/panels/panel.h"

namespace kvscope::ui::test {

std::string& current_activity();

// Runs new_frame + body + error recovery check + render on the current headless context.
// Returns the number of recoverable ImGui errors found (each also reported with ADD_FAILURE).
int run_checked_frame(const std::function<void()>& body, const std::string& activity);

// Vertices the last frame drew in the shell's window for panel `title` (its children included),
// found by the window's stable ID part ("###<title>", see panel_window_id); -1 when there is none.
int panel_vertices(const std::string& title);

// One checked frame (run_checked_frame) of `panel` alone, in a window `title` of `size` at the
// origin; returns the vertices that window drew (its own draw list).
int draw_panel_alone(Panel& panel, AppState& state, const char* title, ImVec2 size,
                     const std::string& activity);

}  // namespace kvscope::ui::test

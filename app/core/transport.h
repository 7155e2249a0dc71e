// The transport bar: play/pause, step, jump to ends, speed, and a scrubber over the whole run
// that doubles as an overview (a sparkline of pool usage with preemption ticks).
#pragma once

#include "app/core/app_state.h"

namespace kvscope::ui {

// Draws the transport contents into the current window (one row).
void draw_transport(AppState& state);

// Applies the transport shortcuts (Space, Left/Right, Shift+Left/Right, Home/End) when no text
// field has focus. Returns true when a key was handled.
bool handle_transport_keys(AppState& state);

}  // namespace kvscope::ui

// Panel: the interface every kvscope-ui panel implements (one class per panel, state inside it).
#pragma once

#include <string>

#include <imgui.h>

#include "app/core/app_state.h"

namespace kvscope::ui {

class Panel {
 public:
  virtual ~Panel() = default;
  virtual const char* title() const = 0;  // window title, unique among panels
  // The title as shown, e.g. with the model's name; the window's ID stays title() (see
  // panel_window_name).
  virtual std::string shown_title(const AppState&) const { return title(); }
  virtual std::string help() const = 0;       // two sentences on the concept it shows
  virtual const char* docs_page() const = 0;  // "docs/concepts/<page>.md"
  // Draws the panel's contents into the current window (the shell owns Begin/End and the (?)).
  virtual void draw(AppState& state) = 0;
  // Background work in flight (a capture, a sweep, a variant run): screenshots wait for it.
  virtual bool busy() const { return false; }

  bool visible = true;
};

// The ImGui window name of a panel: "<shown title>###<title>", so the ID (window position, size,
// focus) stays the same when the shown title changes. ImGui::FindWindowByName(panel_window_id(p))
// finds it whatever is shown.
inline std::string panel_window_id(const Panel& p) {
  return std::string("###") + p.title();
}
inline std::string panel_window_name(const Panel& p, const AppState& state) {
  return p.shown_title(state) + panel_window_id(p);
}

}  // namespace kvscope::ui

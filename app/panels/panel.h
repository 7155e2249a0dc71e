// Panel: the interface every kvscope-ui panel implements (one class per panel, state inside it).
#pragma once

#include <string>

#include <imgui.h>

#include "app/core/app_state.h"

namespace kvscope::ui {

class Panel {
 public:
  virtual ~Panel() = default;
  virtual const char* title() const = 0;      // window title, unique among panels
  virtual std::string help() const = 0;       // two sentences on the concept it shows
  virtual const char* docs_page() const = 0;  // "docs/concepts/<page>.md"
  // Draws the panel's contents into the current window (the shell owns Begin/End and the (?)).
  virtual void draw(AppState& state) = 0;
  // Background work in flight (a capture, a sweep, a variant run): screenshots wait for it.
  virtual bool busy() const { return false; }

  bool visible = true;
};

}  // namespace kvscope::ui

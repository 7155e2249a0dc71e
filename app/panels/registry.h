// The one list of panels: the implemented ones (make_panels) and the planned extension points.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "app/panels/panel.h"

namespace kvscope::ui {

// Every implemented panel, in menu order. Add a new panel here (one line) and nowhere else.
std::vector<std::unique_ptr<Panel>> make_panels();

// Panels designed but not built yet: listed (disabled) in the View menu.
struct PlannedPanel {
  const char* title;
  const char* docs_page;
  const char* what;  // one line: what it will show
};
std::span<const PlannedPanel> planned_panels();

}  // namespace kvscope::ui

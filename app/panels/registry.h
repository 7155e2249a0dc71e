// The one list of panels: the implemented ones (make_panels) and the planned extension points.
#pragma once

#include <memory>
#include <vector>

#include "app/panels/panel.h"

namespace kvscope::ui {

// Every implemented panel, in menu order. Add a new panel here (one line) and nowhere else.
std::vector<std::unique_ptr<Panel>> make_panels();

}  // namespace kvscope::ui

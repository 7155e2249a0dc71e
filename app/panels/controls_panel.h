// Controls panel: the cache policy of the loaded scenario (block size, K and V formats, prefix
// caching and its index, pool budget, allocator, preemption). Changing one restarts the scenario
// with that override, deterministically; or the change goes to the Compare panel's variant.
#pragma once

#include "app/panels/panel.h"

namespace kvscope::ui {

class ControlsPanel final : public Panel {
 public:
  const char* title() const override { return "Controls"; }
  std::string help() const override;
  const char* docs_page() const override { return "docs/ui.md#controls"; }
  void draw(AppState& state) override;

 private:
  bool edit_variant_ = false;  // false: changes restart the run; true: they set the variant
};

}  // namespace kvscope::ui

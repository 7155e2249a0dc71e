// Controls panel: the model the scenario runs on, and the cache policy of the loaded scenario
// (block size, K and V formats, prefix caching and its index, pool budget, allocator,
// preemption). Changing one restarts the scenario with that override, deterministically; or a
// policy change goes to the Compare panel's variant.
#pragma once

#include <string>
#include <vector>

#include "app/panels/panel.h"

namespace kvscope::ui {

struct RunInfo;

// One entry of the model picker: the scenario's own model first, then every named model.
struct ModelChoice {
  std::string arg;      // what RunSession::open takes ("" = the scenario's own model)
  std::string label;    // "scenario default: stories260K", "smollm2 (SmolLM2-135M-Instruct)"
  std::string found;    // the file locate_model found ("" for synthetic models or when missing)
  std::string missing;  // why it cannot load ("not found: run scripts/models.sh ..."), or ""
};

class ControlsPanel final : public Panel {
 public:
  const char* title() const override { return "Controls"; }
  std::string help() const override;
  const char* docs_page() const override { return "docs/ui/compare.md#controls"; }
  void draw(AppState& state) override;

  // The model picker's entries for a run, each checked on disk (locate_model).
  static std::vector<ModelChoice> model_choices(const RunInfo& info);
  // What picking `arg` does: asks the shell to restart the run on that model (AppState::
  // model_request; "" or the scenario's own argument = the scenario's model). Returns false when
  // the run already uses it or is not a scenario.
  static bool choose_model(AppState& state, const std::string& arg);

 private:
  void draw_model_picker(AppState& state, const RunInfo& info);

  bool edit_variant_ = false;         // false: changes restart the run; true: they set the variant
  std::vector<ModelChoice> choices_;  // checked on disk when the picker opens
  std::string choices_for_;           // scenario path + model argument choices_ was built for
};

}  // namespace kvscope::ui

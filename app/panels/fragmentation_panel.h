// Fragmentation: token-level occupancy vs block-level allocation, internal fragmentation,
// reservation waste and the largest free run, now and over the whole run (from StepMetrics).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "app/panels/panel.h"
#include "app/widgets/plot.h"

namespace kvscope::ui {

class FragmentationPanel final : public Panel {
 public:
  const char* title() const override { return "Fragmentation"; }
  std::string help() const override;
  const char* docs_page() const override { return "docs/ui/pool.md#fragmentation"; }
  void draw(AppState& state) override;

 private:
  void rebuild_series(const AppState& state);
  std::vector<PlotSeries> slots_, waste_, free_;  // plotted series, rebuilt when the run changes
  const StepMetrics* built_for_ = nullptr;        // the metrics array the series came from
  std::size_t built_size_ = 0;
  std::string export_message_;
};

}  // namespace kvscope::ui

// Compare panel: the loaded scenario run beside a variant policy (set in the Controls panel or a
// presenter caption) on the same requests and seed, in lockstep at the selected step: a table of
// metric differences and overlaid plots over time, and each request's generated text in both runs
// side by side (where a policy changes what the model says: eviction, KV formats, MLA). The
// variant computes on its own worker thread.
#pragma once

#include <memory>
#include <string>

#include "app/core/generated_text.h"
#include "app/core/run_session.h"
#include "app/panels/panel.h"

namespace kvscope::ui {

class ComparePanel final : public Panel {
 public:
  const char* title() const override { return "Compare"; }
  std::string help() const override;
  const char* docs_page() const override { return "docs/ui/compare.md#compare"; }
  void draw(AppState& state) override;
  bool busy() const override { return variant_ && variant_->is_running(); }

  RunSession* variant() { return variant_.get(); }  // tests

 private:
  void sync(AppState& state);
  void draw_table(const AppState& state, const StepMetrics& a, const StepMetrics& b, int step_b);
  void draw_plots(const AppState& state);
  void draw_text(const AppState& state, int step_b);

  std::unique_ptr<RunSession> variant_;
  int generation_ = -1;           // AppState source generation the variant was opened for
  int version_ = -1;              // AppState::compare_variant_version it was opened for
  int single_plot_ = 0;           // a short panel shows one plot: 0 utilization, 1 blocks in use
  long long variant_serial_ = 0;  // +1 on every variant opened (the variant's text fold restarts)
  GeneratedTokens text_a_, text_b_;  // the run's and the variant's generated tokens
  std::string error_;
};

}  // namespace kvscope::ui

// Quality vs memory panel: the Pareto view of KV cache variants, one series per family (KV
// formats, MLA rank, token eviction policy at a budget): KL divergence and perplexity change
// against the exact fp32 cache, over KV bytes per token of context, computed in the background on
// the real model (or loaded from `kvscope eval` sweep CSVs and merged), each point labelled.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "app/core/quality_job.h"
#include "app/panels/panel.h"

namespace kvscope::ui {

struct RunInfo;

class QualityPanel final : public Panel {
 public:
  static constexpr long kEvalTokens = kQualitySweepTokens;  // eval tokens scored per variant

  const char* title() const override { return "Quality vs memory"; }
  // "Quality vs memory: <model>": the model the figures are (being) computed on.
  std::string shown_title(const AppState& state) const override;
  std::string help() const override;
  const char* docs_page() const override { return "docs/concepts/quantization.md"; }
  void draw(AppState& state) override;
  bool busy() const override { return job_.busy(); }

  void wait_for_sweep() { job_.wait(); }  // tests
  // Shows `sweep` as if it had been loaded (tests; the Load CSV box does the same).
  void show(std::shared_ptr<const QualitySweep> sweep) {
    job_.cancel();
    sweep_ = std::move(sweep);
  }
  const QualitySweep* sweep() const { return sweep_.get(); }
  // Merges the sweep CSV at `path` (quant_sweep.csv, mla_sweep.csv or evict_sweep.csv from
  // `kvscope eval ... --out`) into the points shown, as Load CSV does (File > Open of a .csv,
  // the browser's picker). False when it cannot be read: error() says why (also in the panel).
  bool load_csv(const std::string& path);
  const std::string& error() const { return error_; }
  // The model source the running or finished sweep is for ("" before one started; tests).
  const std::string& sweep_model() const { return started_for_; }

 private:
  // Takes the finished sweep (or its error) from the job; while it runs, its latest preview.
  void take_job_result();
  // Drops the figures of an earlier model and starts the sweep once per model (not over CSVs).
  void start_for_model(const RunInfo* info, bool can_run);
  // The job's line: a progress bar with Cancel, "sweep cancelled", or why nothing can run.
  void draw_job_status(const RunInfo* info, bool can_run);
  // The one-line setup of a compact panel, the full setup in its tooltip.
  void draw_compact_setup() const;
  // Recompute for a cached or shipped sweep; true when pressed (the sweep is dropped).
  bool draw_recompute_button(bool can_run);
  // The CSV path box and Load CSV (merged into the points shown); in the browser, Load CSV
  // opens the browser's file picker instead.
  void draw_csv_loader();
  void draw_plots(AppState& state);
  // The sweep's setup: model, tokens, windows, text and block; loaded CSVs; the memory axis; the
  // disk cache. Wrapped at the panel's edge when `wrap` (not in a tooltip).
  void draw_setup_lines(bool wrap) const;

  QualityJob job_;
  std::shared_ptr<const QualitySweep> sweep_;
  std::string started_for_;  // model source the running/finished sweep is for
  std::chrono::steady_clock::time_point started_at_;  // when the running sweep started
  std::string error_;
#if !defined(__EMSCRIPTEN__)  // the page's Load CSV takes a picked file, not a path
  char csv_path_[512] = "reports/quant/quant_sweep.csv";
#endif
  bool cancelled_ = false;  // the user cancelled the sweep (Run the sweep starts it again)
  bool recompute_ = false;  // the next start ignores the disk cache (Recompute)
  bool show_kl_ = false;    // a short presenter panel shows one plot: perplexity, or KL
};

}  // namespace kvscope::ui

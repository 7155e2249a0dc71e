// Kernel panel (issue #45): the paged-attention launch of the step shown, as the CUDA kernels run
// it on the SIMT emulator. The grid of thread blocks (rows: the step's queries; columns: KV head
// and split, or query head), each coloured by how close its loads come to the fewest 32-byte
// transactions their bytes allow; hovering one marks the KV blocks it reads in the Block pool
// panel and lists them; clicking selects its request. Below, one warp's load over the sectors it
// touches (the bytes asked for against the bytes moved), and split-K's reduction. The layer, the
// K/V format and the block size are choices: each re-runs the scenario on the emulated device
// (app/core/kernel_job.h).
#pragma once

#include <optional>
#include <string>

#include "app/core/kernel_job.h"
#include "app/panels/panel.h"
#include "kernels/backend/attention_timing.h"

namespace kvscope::ui {

class KernelPanel final : public Panel {
 public:
  const char* title() const override { return "Kernel"; }
  std::string help() const override;
  const char* docs_page() const override { return "docs/concepts/paged-attention-kernel.md"; }
  void draw(AppState& state) override;
  bool busy() const override { return job_.busy(); }

  // Tests: the trace shown (null while none), waiting for the job, and the choices.
  const KernelTraceView* shown() const { return view_.get(); }
  void wait_for_trace() { job_.wait(); }
  void set_layer(int layer) { layer_ = layer; }
  void set_format(const std::optional<KvFormat>& f) { format_ = f; }
  void set_block_size(std::optional<int> b) { block_ = b; }
  // The line drawn about the GPU's time for the launch shown ("" when none was drawn).
  const std::string& measured_text() const { return measured_text_; }
  // The GPU timings shown beside the emulator's bytes instead of the shipped file's.
  void set_timings(std::optional<KernelTimings> t) {
    timings_ = std::move(t);
    timings_loaded_ = true;
  }
  // The thread block the grid's mouse is over (-1: none), and where block `b`'s cell was drawn
  // (screen coordinates of its centre), as of the last frame.
  int hovered_block() const { return hovered_; }
  ImVec2 cell_center(int b) const;

 private:
  struct Wanted {
    int generation = -1, ui_step = -1, layer = 0;
    std::string format;
    int block = 0;
    bool operator==(const Wanted&) const = default;
  };
  Wanted wanted(const AppState& state) const;
  // Whether the run's model is small enough to trace by itself on every change (else on request).
  static bool auto_trace(const RunInfo& info);
  void draw_controls(const AppState& state, const RunInfo& info);
  void poll(AppState& state, const std::shared_ptr<const RunInfo>& info);
  void draw_summary(const AppState& state);
  void draw_measured(const AppState& state, const StepKernelTrace& t);
  void draw_writes(AppState& state);
  // The GPU check's timings (KVSCOPE_GPU_TIMINGS, else assets/gpu/kernel-timings.json), loaded
  // on first use; nullptr when there are none.
  const KernelTimings* timings();
  void draw_grid(AppState& state);
  void draw_warp(const AppState& state);
  void draw_splits(const AppState& state);

  KernelJob job_;
  std::shared_ptr<KernelTraceView> view_;
  std::optional<Wanted> running_;    // what the job in flight traces
  std::optional<Wanted> failed_;     // what the last failure was for (not retried by itself)
  std::optional<Wanted> requested_;  // what the Trace button asked for
  int layer_ = 0;
  std::optional<KvFormat> format_;
  std::optional<int> block_;
  int hovered_ = -1;
  int focus_ = 0;  // the thread block whose warp is drawn: the hovered one, else the last hovered
  ImVec2 grid_origin_{0, 0};  // the last frame's first cell and cell size
  ImVec2 cell_size_{0, 0};
  unsigned grid_cols_ = 1;
  std::optional<KernelTimings> timings_;
  bool timings_loaded_ = false;
  std::string timings_error_;
  std::string measured_text_;
};

}  // namespace kvscope::ui

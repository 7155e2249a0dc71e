// AppState: the view model the panels read. It owns the data source, the selected step, the pool
// state at that step (recomputed only when the step changes) and the transport (play, speed).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "app/core/data_source.h"
#include "app/core/run_info.h"

namespace kvscope::ui {

// The request with `id` in a pool state (requests are kept in id order), or nullptr.
const RequestState* find_request(const PoolState& pool, int id);

class AppState {
 public:
  explicit AppState(std::unique_ptr<DataSource> source);

  // Replaces the run being shown (keeps the step if it still exists).
  void set_source(std::unique_ptr<DataSource> source);
  const DataSource& source() const { return *source_; }
  int source_generation() const { return source_generation_; }  // +1 on every set_source
  const TimelineHeader& header() const { return source_->header(); }
  bool is_demo() const { return source_->is_demo(); }

  int num_steps() const { return source_->num_steps(); }
  int step() const { return step_; }
  void set_step(int step);  // clamped to [0, num_steps); leaves follow-live mode
  void step_by(int delta) { set_step(step_ + delta); }
  bool is_live() const { return source_->is_live(); }

  const PoolState& pool() const { return pool_; }
  std::span<const StepMetrics> metrics_history() const { return source_->all_metrics(); }
  const StepMetrics& metrics() const { return source_->all_metrics()[step_]; }

  // Transport: playing advances `speed` steps per second of wall time. Playing into the head of a
  // run that is still being computed switches to follow-live: the newest step every frame.
  bool playing = false;
  bool follow_live = false;
  float speed = 12.0f;
  void toggle_play();
  void advance(double dt_seconds);

  // The sequence the user picked (click in the block map or block tables); panels highlight it.
  std::optional<int> selected_request;
  // Physical blocks the Kernel panel's hovered thread block reads, and the ImGui frame that set
  // them: the Block pool panel outlines them while they are from this frame or the one before
  // (the Kernel panel may draw after it), so they go when the hover or the panel does.
  std::vector<int> kernel_blocks;
  int kernel_blocks_frame = -1;
  // The request of that thread block (-1: none), for the Block tables panel's row, on the same
  // frame stamp.
  int kernel_request = -1;
  // Presenter mode: larger fonts, high contrast, thicker lines.
  bool presenter = false;
  // Set by the Controls panel: the shell restarts the scenario with this override at the end of
  // the frame (deterministically: same scenario, same seed, only the policy differs).
  std::optional<PolicyOverride> restart_request;
  // Set by the Controls panel's model picker: the shell restarts the scenario on this model (a
  // short name or file; "" = the scenario's own), keeping the policy. It loads on the UI thread,
  // two frames after the request so "loading ..." is on screen while the window waits.
  std::optional<std::string> model_request;
  // Set by the Live attach panel's Detach button: the shell stops following the stream (the
  // recording stays loaded).
  bool detach_request = false;
  // Set by a presenter caption's view (the shell): the attention panel opens this layer and head
  // or its sink grid once, then clears it.
  struct AttentionFocus {
    std::optional<int> layer, head;
    std::optional<bool> sink_grid;
  };
  std::optional<AttentionFocus> attention_focus;
  // Steps where playing stops (captions whose view pauses), ascending: playing across one stops
  // there, following a live run too.
  std::vector<int> pause_steps;
  // Set by a presenter caption's view: the Compare panel opens this tab (0 memory, 1 text) once,
  // then clears it.
  std::optional<int> compare_tab;
  // The Compare panel's variant: the policy run beside the current one (Controls panel sets it).
  PolicyOverride compare_variant;
  int compare_variant_version = 0;  // +1 on every change of compare_variant

 private:
  void go_to(int step);  // set_step without leaving follow-live

  std::unique_ptr<DataSource> source_;
  int step_ = 0;
  int source_generation_ = 0;
  double step_accumulator_ = 0.0;
  PoolState pool_;
};

}  // namespace kvscope::ui

// KernelJob: the Kernel panel's background trace (issue #45). It re-runs the shown scenario on the
// CUDA backend's kernels under the SIMT emulator (a fresh Simulator, the run's own policy and
// model, optionally another K/V format or block size) up to the step shown, then runs the next
// engine step with layer L's attention launch recorded (kernels/backend/kernel_trace_run.h).
// One trace at a time; the result is handed over once complete. The browser build has no
// emulator: there the job's result is an error saying so.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/core/background_job.h"
#include "app/core/run_info.h"
#include "kernels/backend/kernel_trace_run.h"

namespace kvscope::ui {

struct KernelTraceView {
  int generation = -1;  // AppState::source_generation() of the run it belongs to
  int ui_step = -1;     // the step shown when it was asked for, and traced
  int layer = 0;
  // What the re-run changed: "" for the run's own, else the format or block size shown.
  std::string format_choice;
  int block_choice = 0;  // 0: the run's
  // Whether its physical block ids are the shown run's (same format and block size): the block
  // map can then mark them.
  bool same_pool = true;
  std::unique_ptr<StepKernelTrace> trace;
  LaunchShape shape;  // the trace's launch, as a GPU timing is matched on (launch_shape)
  // Per thread block of the launch: its first K load instruction (none when it read nothing).
  std::vector<std::optional<sim::WarpLoad>> first_k_load;
  std::string error;  // set instead of trace on failure
};

class KernelJob : public BackgroundJob<KernelTraceView> {
 public:
  KernelJob() = default;
  ~KernelJob() { cancel(); }  // before the base: the work reads this job

  struct Request {
    std::shared_ptr<const RunInfo> info;  // the shown run's (its scenario, policy and model)
    int generation = -1;
    int ui_step = 0;
    int layer = 0;
    std::optional<KvFormat> format;  // K and V instead of the run's
    std::optional<int> block_size;   // instead of the run's
  };
  // Starts a trace; false (nothing started) while one runs, or without a scenario run.
  bool start(Request r);
  // Engine steps the re-run has completed of those it needs (ui_step + 1), for a progress line.
  int steps_done() const { return steps_done_.load(); }
  int steps_needed() const { return steps_needed_.load(); }

 private:
  std::atomic<int> steps_done_{0};
  std::atomic<int> steps_needed_{0};
};

}  // namespace kvscope::ui

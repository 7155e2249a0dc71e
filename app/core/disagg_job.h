// DisaggJob: the Prefill/decode panel's background run (issue #44). It runs the shown scenario's
// requests colocated and disaggregated on the modelled clock (engine/sched/disagg.h), with the
// scenario's cache.disaggregation section, or the defaults when it has none, and the panel's link
// and transfer choices. One run at a time; the result is handed over once complete.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "app/core/background_job.h"
#include "app/core/run_info.h"
#include "engine/sched/disagg.h"

namespace kvscope::ui {

struct DisaggView {
  int generation = -1;          // AppState::source_generation() of the run it belongs to
  std::string link_choice;      // "" = the scenario's, else a preset's name
  std::string transfer_choice;  // "" = the scenario's, else "layer" or "request"
  bool from_scenario = false;   // the scenario has a cache.disaggregation section
  DisaggOptions options;        // what ran
  DisaggReport colocated, disaggregated;
  DisaggSummary co, di;
  double end = 0;  // the last record's end over both runs
  std::string error;
};

class DisaggJob : public BackgroundJob<DisaggView> {
 public:
  DisaggJob() = default;
  ~DisaggJob() { cancel(); }  // before the base: the work reads this job

  struct Request {
    std::shared_ptr<const RunInfo> info;
    int generation = -1;
    std::string link;      // a preset's name, "" = the scenario's
    std::string transfer;  // "layer" or "request", "" = the scenario's
  };
  // Starts a run; false (nothing started) while one runs, or without a scenario run.
  bool start(Request r);
  // Engine steps run so far over both runs, for a progress line.
  long steps_done() const { return steps_done_.load(); }

 private:
  std::atomic<long> steps_done_{0};
};

}  // namespace kvscope::ui

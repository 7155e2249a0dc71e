// RunSession: one loaded run for the UI. A scenario is parsed and its model loaded on the calling
// thread (errors throw kvscope::Error at once), then the Simulator steps on a worker thread that
// checks a stop flag between steps; a recording (.kvr) is loaded with Timeline::load.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "app/core/attach_feed.h"
#include "app/core/data_source.h"
#include "app/core/run_info.h"
#include "engine/model/tokenizer.h"
#include "engine/trace/timeline.h"

namespace kvscope {
class Simulator;
}

namespace kvscope::ui {

// A scenario's Simulator as RunSession::open builds it (the policy, model and backend applied),
// not stepped yet, with the run's description: for panels that re-run the scenario their own way
// (the Kernel panel on the emulated device). Throws as RunSession::open does. Whoever destroys it
// includes engine/sched/simulator.h.
struct ScenarioRun {
  std::unique_ptr<Simulator> sim;
  std::shared_ptr<RunInfo> info;
  std::vector<std::vector<int>> prompts;  // [sequence id] prompt token ids
  int max_steps = 0;                      // the scenario's `steps`, or the default cap
};
ScenarioRun build_scenario_run(const std::string& path, bool bookkeeping,
                               const PolicyOverride& policy, const std::string& model);

class RunSession {
 public:
  // Opens a scenario (.json) or a recording (anything else). Throws kvscope::Error naming the
  // file, JSON path and value on bad input; the caller keeps whatever it had loaded before.
  // `bookkeeping`: no model compute (block accounting only), for fast tests. `policy` overrides
  // the scenario's cache settings and `model` its model (a short name such as "smollm2", a file
  // or "synthetic:<spec>"; "" = the scenario's own), both from the Controls panel; both must be
  // empty for recordings. The model loads on the calling thread (about 2 s for SmolLM2-135M).
  // `first`: where a scenario's first step runs. kHere (the default) returns with it done, so the
  // run always has a step to show; kOnWorker returns at once and has_step() says when it is
  // there (a SmolLM2 chat's first step is its prompts' prefill: seconds in the browser build),
  // or the worker stopped with an error (take_error) instead.
  enum class FirstStep { kHere, kOnWorker };
  static std::unique_ptr<RunSession> open(const std::string& path, bool bookkeeping = false,
                                          const PolicyOverride& policy = {},
                                          const std::string& model = {},
                                          FirstStep first = FirstStep::kHere);
  // Attaches to a live vLLM / SGLang KV-event stream (File > Attach). Throws kvscope::Error for a
  // bad endpoint or a port in use; a publisher that is not there yet is not an error (the Live
  // attach panel and the status bar say so).
  static std::unique_ptr<RunSession> attach(const AttachRequest& request);
  ~RunSession();  // stops and joins the worker
  RunSession(const RunSession&) = delete;
  RunSession& operator=(const RunSession&) = delete;

  // A data source reading this run's Timeline (safe while the worker appends).
  std::unique_ptr<DataSource> make_source() const;
  std::shared_ptr<const Timeline> timeline() const { return timeline_; }
  const std::string& path() const { return path_; }
  bool is_scenario() const { return is_scenario_; }
  const std::shared_ptr<AttachFeed>& attach_feed() const { return feed_; }
  bool is_running() const { return running_->load(); }
  // Whether the run has a step to show (always, but for a scenario opened with kOnWorker whose
  // first step is still computing or failed).
  bool has_step() const { return timeline_ && timeline_->num_steps() >= 1; }
  // While that first step computes: "opening NAME: computing its first step... N s" (the count
  // from the first second on), for the status line the UI shows meanwhile.
  std::string first_step_line(double seconds) const;
  // Why the worker stopped without a first step (its error, taken).
  std::string first_step_error();
  // The tokenizer of the scenario's model (null for recordings and synthetic models).
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  // How the scenario was started (null for recordings).
  std::shared_ptr<const RunInfo> run_info() const { return info_; }

  // Asks the worker to stop after its current step (attached: detaches) and waits. Idempotent.
  void stop();
  // Asks the worker to stop after its current step, without waiting (is_running says when).
  void request_stop() { stop_ = true; }
  // Blocks until the worker finished (tests).
  void wait();
  // An exception the worker caught (once), to show in a modal.
  std::optional<std::string> take_error();

 private:
  RunSession() = default;
  void work();

  std::string path_;
  bool is_scenario_ = false;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::vector<std::vector<int>> prompts_;  // [sequence id] prompt token ids
  std::shared_ptr<const RunInfo> info_;
  std::shared_ptr<const Timeline> timeline_;
  std::unique_ptr<Simulator> sim_;    // touched only by the worker once it started
  std::shared_ptr<AttachFeed> feed_;  // attached runs: the feed owns its own worker
  int max_steps_ = 0;                 // the scenario's `steps`, or the default cap
  std::thread worker_;
  std::atomic<bool> stop_{false};
  std::shared_ptr<std::atomic<bool>> running_ = std::make_shared<std::atomic<bool>>(false);
  std::mutex error_mutex_;
  std::optional<std::string> error_;
};

}  // namespace kvscope::ui

// AttentionJob: captures one sequence's attention weights on a background thread by running its
// tokens through the real model (a fresh cache in the run's K/V formats, evicting tokens with the
// run's policy when it has one) with an AttentionRecorder attached, so the UI never waits on the
// forward pass. One capture at a time;
// the result is handed over once it is complete. When the run quantizes K/V (or a format is
// previewed on an fp32 run) it also measures the per-position quantization error
// (engine/analysis/kv_quant_error.h): the same tokens run in lockstep with an fp32 cache.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/core/background_job.h"
#include "engine/analysis/kv_quant_error.h"
#include "engine/evict/attention_stats.h"
#include "engine/model/checkpoint.h"
#include "engine/sched/sim_config.h"
#include "engine/sparse/key_selector.h"

namespace kvscope::ui {

struct AttentionCapture {
  int generation = -1;  // AppState::source_generation() of the run it belongs to
  int request = -1;
  std::vector<int> tokens;  // [positions] fed in order from position 0
  int n_layers = 0;
  int n_heads = 0;
  std::unique_ptr<AttentionRecorder> recorder;  // full matrices when tokens.size() <= 512
  std::vector<SinkReport> sinks;                // detect_sinks() over the whole capture
  // The run evicts tokens: the capture ran the same policy, so the weights are the ones the
  // evicted cache produced (an evicted key receives nothing from later queries).
  bool under_eviction = false;
  std::string error;  // set instead of recorder on failure
  // The format previewed for K and V on an fp32 run (the recorder still holds the fp32 run).
  std::optional<KvFormat> preview;
  // Quantization error against fp32: null when the run is fp32 and nothing is previewed, or when
  // it cannot be measured (errors_note says why).
  std::unique_ptr<KvErrorProfile> errors;
  std::string errors_note;
  // Sparse attention by token selection (engine/sparse): each query head attended only to the
  // keys this selector picked from the whole cache; a key it skipped has weight 0.
  std::optional<SparseOptions> selection;
};

// Whether the run keeps K and V in exact fp32 (no quantization error to measure unless a format
// is previewed).
bool kv_is_fp32(const SimConfig& config);

class AttentionJob : public BackgroundJob<AttentionCapture> {
 public:
  AttentionJob() = default;
  ~AttentionJob() { cancel(); }  // before the base: the work reads this job

  // Starts capturing; ignored (returns false) while a capture is running. `preview` (fp32 runs
  // only; ignored otherwise) is stored for K and V to measure what that format would do.
  // `selection`: capture sparse attention instead, each query attending only to the keys the
  // selector picks from the run's whole cache (not for runs that evict tokens or cache latents:
  // the capture fails saying so); no quantization error is measured then.
  bool start(std::shared_ptr<const Model> model, const SimConfig& config, int generation,
             int request, std::vector<int> tokens, std::optional<KvFormat> preview = {},
             std::optional<SparseOptions> selection = {});
  int busy_request() const { return busy_request_; }
  void cancel_after_finish() { wait(); }  // tests: lets a running capture finish, then joins

 private:
  int busy_request_ = -1;
};

}  // namespace kvscope::ui

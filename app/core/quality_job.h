// QualityJob: the quality-vs-memory sweep for the UI, on a background thread: every KV format of
// the sweep list, MLA mode A at several ranks and streaming token eviction at several budgets,
// each against the exact fp32 cache (one QualityEvaluator on the real model, a small eval set).
// What it runs and the sweep-CSV loader are in quality_sweep.h.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "app/core/background_job.h"
#include "app/core/quality_sweep.h"
#include "engine/model/checkpoint.h"
#include "engine/model/tokenizer.h"

namespace kvscope::ui {

class QualityJob : public BackgroundJob<QualitySweep> {
 public:
  ~QualityJob() { cancel(); }

  // Evaluates every sweep variant on the windows of `text_path` up to at least `max_tokens`
  // tokens, each window at most that long (quality_eval_windows).
  // With a `cache_dir` (app/core/quality_cache.h), a sweep already computed from the same
  // inputs is read from it instead (unless `reuse` is false: recompute), and a newly finished
  // one is written there; "" computes without a cache.
  // With a `shipped_dir` (app/core/quality_shipped.h), when the sweep is computed, a shipped file
  // holding the same inputs (by content) becomes preview() at once, and each point the live sweep
  // finishes replaces its shipped one there; "" looks for none.
  void start(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tokenizer,
             std::string text_path, long max_tokens, int block_size, std::string cache_dir = {},
             bool reuse = true, std::string shipped_dir = {});
  // While the sweep is computed: the shipped results with the points finished so far in place of
  // theirs (QualitySweep::shipped_note says where they came from), or null when no shipped file
  // matched (yet). A new one after each finished point; take() hands over the finished sweep.
  std::shared_ptr<const QualitySweep> preview() const {
    std::lock_guard<std::mutex> lock(preview_mutex_);
    return preview_;
  }
  // Progress: steps finished (the fp32 reference counts as one) out of total_steps().
  int steps_done() const { return steps_done_.load(); }
  int total_steps() const { return total_steps_.load(); }
  float fraction_in_step() const { return fraction_.load(); }

 private:
  std::atomic<int> steps_done_{0};
  std::atomic<int> total_steps_{1};
  std::atomic<float> fraction_{0.0f};
  mutable std::mutex preview_mutex_;
  std::shared_ptr<const QualitySweep> preview_;  // see preview()
};

}  // namespace kvscope::ui

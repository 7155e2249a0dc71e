// QualityJob: the quality-vs-memory sweep for the UI, on a background thread: every KV format of
// the sweep list against the exact fp32 cache (QualityEvaluator on the real model, a small eval
// set), or the same figures loaded from a `kvscope eval --sweep` CSV.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/analysis/quality.h"
#include "engine/model/checkpoint.h"
#include "engine/model/tokenizer.h"

namespace kvscope::ui {

struct QualitySweep {
  std::string model;   // checkpoint path (or the CSV path when loaded)
  std::string source;  // eval text, or "loaded from <csv>"
  long positions = 0;  // scored next-token predictions per format
  int windows = 0;
  int block_size = 16;
  bool from_csv = false;
  std::vector<QualityReport> reports;  // fp32 first
  std::string error;                   // set instead of reports on failure
};

// The formats the sweep runs ("K/V" names as `kvscope eval` takes them), fp32 first.
std::vector<std::pair<std::string, std::string>> sweep_formats();

// Reads a quant_sweep.csv written by `kvscope eval --sweep`; throws kvscope::Error naming the
// file, line and column on bad input.
QualitySweep load_sweep_csv(const std::string& path);

class QualityJob {
 public:
  QualityJob() = default;
  ~QualityJob();  // cancels and joins
  QualityJob(const QualityJob&) = delete;
  QualityJob& operator=(const QualityJob&) = delete;

  // Evaluates every sweep format on at most `max_tokens` tokens of `text_path`.
  void start(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tokenizer,
             std::string text_path, long max_tokens, int block_size);
  bool busy() const { return busy_.load(); }
  // Progress: formats finished (the reference counts as one) out of sweep_formats().size() + 1.
  int formats_done() const { return formats_done_.load(); }
  float fraction_in_format() const { return fraction_.load(); }
  std::shared_ptr<QualitySweep> take();  // the finished sweep (once), or null
  void cancel();
  void wait() {  // tests
    if (worker_.joinable()) worker_.join();
  }

 private:
  std::thread worker_;
  std::atomic<bool> busy_{false};
  std::atomic<bool> cancel_{false};
  std::atomic<int> formats_done_{0};
  std::atomic<float> fraction_{0.0f};
  std::mutex mutex_;
  std::shared_ptr<QualitySweep> done_;
};

}  // namespace kvscope::ui

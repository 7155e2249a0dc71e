// MemoryJob: the Memory panel's measurement, in the background: one sequence per context through
// the loaded run's model into a pool sized for it, its KV memory read from the allocator and from
// the pages the OS backs (engine/analysis/kv_memory_probe.h). Progress in tokens; cancellable.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "app/core/background_job.h"
#include "engine/analysis/kv_memory_probe.h"
#include "engine/model/checkpoint.h"

namespace kvscope::ui {

struct MemoryMeasurement {
  std::string model;  // the model's source
  bool random_weights = false;
  std::string format;  // K and V formats ("fp16", or "K int8 + V fp16")
  std::vector<KvMemoryPoint> points;
  std::string error;  // why it failed ("" = points are valid)
};

// The contexts the panel measures for a model trained on `seq_len` tokens: powers of two from
// 1,024 (or a quarter of seq_len, if smaller) up to seq_len, at most 2,048 (minutes past that on
// a laptop CPU for a 135M model).
std::vector<int> memory_job_contexts(int seq_len);

class MemoryJob : public BackgroundJob<MemoryMeasurement> {
 public:
  ~MemoryJob() { cancel(); }

  // Measures `contexts` (ascending) on the model with `text_path`'s tokens (repeated as needed),
  // K and V in the given formats, blocks of `block_size`, on one CPU thread.
  void start(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tokenizer,
             std::string text_path, std::vector<int> contexts, KvFormat k_format, KvFormat v_format,
             int block_size);
  float fraction() const { return fraction_.load(); }

 private:
  std::atomic<float> fraction_{0.0f};
};

}  // namespace kvscope::ui

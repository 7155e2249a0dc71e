// MemoryJob: measure_kv_memory on a worker thread, cancelled through its progress callback.
#include "app/core/memory_job.h"

#include <algorithm>

#include "engine/backend/backend.h"
#include "engine/common/error.h"
#include "engine/common/text_lines.h"
#include "engine/infer/transformer.h"

namespace kvscope::ui {

namespace {

struct Cancelled {};

}  // namespace

std::vector<int> memory_job_contexts(int seq_len) {
  const int top = std::min(seq_len, 2048);
  int c = std::min(1024, std::max(1, seq_len / 4));
  std::vector<int> out;
  for (; c < top; c *= 2) out.push_back(c);
  out.push_back(top);
  return out;
}

void MemoryJob::start(std::shared_ptr<const Model> model,
                      std::shared_ptr<const Tokenizer> tokenizer, std::string text_path,
                      std::vector<int> contexts, KvFormat k_format, KvFormat v_format,
                      int block_size) {
  if (busy()) return;
  fraction_ = 0.0f;
  launch([this, model = std::move(model), tokenizer = std::move(tokenizer),
          text_path = std::move(text_path), contexts = std::move(contexts), k_format, v_format,
          block_size] {
    auto m = std::make_shared<MemoryMeasurement>();
    m->format =
        k_format == v_format ? k_format.name() : "K " + k_format.name() + " + V " + v_format.name();
    try {
      if (!model) throw Error("memory", "no model is loaded with this run");
      if (contexts.empty()) throw Error("memory", "expected at least one context, got none");
      m->model = model->source();
      m->random_weights = model->is_random_weights();
      KvMemoryProbeOptions o;
      o.block_size = block_size;
      o.k_format = k_format;
      o.v_format = v_format;
      int repeats = 0;
      const std::vector<int> tokens = probe_tokens(
          tokenizer.get(),
          tokenizer ? read_text_file(text_path, "cannot open the text file") : std::string(),
          contexts.back(), model->config().vocab_size, text_path, &repeats);
      auto backend = make_cpu_backend(1);
      Transformer t(model, *backend);
      m->points = measure_kv_memory(t, tokens, contexts, o, [this](long done, long total) {
        if (cancelled()) throw Cancelled{};
        fraction_ = total > 0 ? static_cast<float>(done) / static_cast<float>(total) : 0.0f;
      });
    } catch (const Cancelled&) {
      return std::shared_ptr<MemoryMeasurement>();
    } catch (const std::exception& e) {
      m->points.clear();
      m->error = e.what();
    }
    return m;
  });
}

}  // namespace kvscope::ui

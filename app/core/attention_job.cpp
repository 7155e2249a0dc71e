// AttentionJob: the background capture.
#include "app/core/attention_job.h"

#include <algorithm>
#include <exception>
#include <span>

#include "engine/analysis/eviction_quality.h"
#include "engine/analysis/sparse_quality.h"
#include "engine/backend/backend.h"
#include "engine/common/error.h"
#include "engine/infer/step_runner.h"
#include "engine/infer/transformer.h"
#include "engine/kv/cache_manager.h"
#include "engine/kv/kv_storage.h"

namespace kvscope::ui {

bool kv_is_fp32(const SimConfig& config) {
  return config.k_format.dtype == KvDtype::kF32 && config.v_format.dtype == KvDtype::kF32;
}

bool AttentionJob::start(std::shared_ptr<const Model> model, const SimConfig& config,
                         int generation, int request, std::vector<int> tokens,
                         std::optional<KvFormat> preview, std::optional<SparseOptions> selection) {
  if (busy() || !model || tokens.empty()) return false;
  busy_request_ = request;
  // The work returns null when cancelled (nothing is handed over).
  return launch([this, model = std::move(model), config, generation, request,
                 tokens = std::move(tokens), preview,
                 selection]() mutable -> std::shared_ptr<AttentionCapture> {
    auto cap = std::make_shared<AttentionCapture>();
    cap->generation = generation;
    cap->request = request;
    const ModelConfig& c = model->config();
    cap->n_layers = c.n_layers;
    cap->n_heads = c.n_heads;
    if (static_cast<int>(tokens.size()) > c.seq_len)
      tokens.resize(static_cast<std::size_t>(c.seq_len));
    cap->tokens = tokens;
    const bool run_fp32 = kv_is_fp32(config);
    if (!run_fp32 || selection) preview.reset();
    cap->preview = preview;
    cap->selection = selection;
    try {
      const int n = static_cast<int>(tokens.size());
      auto backend = make_cpu_backend(1);
      Transformer transformer(model, *backend);
      const int bs = config.block_size;
      auto recorder = std::make_unique<AttentionRecorder>(
          AttentionShapeInfo{c.n_layers, c.n_heads, n}, /*full_matrix_limit=*/512);
      bool captured = false;
      if (selection) {
        // Sparse attention over the run's whole cache, in its formats and block size.
        if (config.evicts_tokens() || config.mla) {
          throw Error("attention", std::string("key selection keeps the whole cache: a run ") +
                                       (config.mla ? "with an MLA latent cache" : "that evicts") +
                                       " has none to select from");
        }
        validate(*selection, c, bs);
        struct Cancelled {};
        SparseVariant variant(*selection, bs, selector_channels(c, model->weights(), *selection),
                              config.k_format, config.v_format);
        variant.set_capture(recorder.get());
        try {
          variant.run(transformer, tokens, [this](int, std::span<const float>) {
            if (cancelled()) throw Cancelled{};
          });
        } catch (const Cancelled&) {
          return nullptr;
        }
        if (!run_fp32) cap->errors_note = "not measured while a key selection is shown";
        captured = true;
      } else if (config.evicts_tokens()) {
        // The run evicts: capture what its cache computed, with the same policy.
        struct Cancelled {};
        EvictionRunOptions o;
        o.evictor = config.token_eviction;
        o.k_format = config.k_format;
        o.v_format = config.v_format;
        o.block_size = bs;
        o.capture = recorder.get();
        EvictionVariant variant(o);
        try {
          variant.run(transformer, tokens, [this](int, std::span<const float>) {
            if (cancelled()) throw Cancelled{};
          });
        } catch (const Cancelled&) {
          return nullptr;
        }
        cap->under_eviction = true;
        captured = true;
      }
      if (selection) {
        // The capture above is the selection's; the error strip is for the dense run.
      } else if (config.mla && (!run_fp32 || preview)) {
        cap->errors_note = "not measured for an MLA latent cache (the capture stores plain K/V)";
      } else if (!run_fp32 || preview) {
        // The recorder watches the run in the run's own formats: the quantized-cache run for a
        // quantized run, the fp32-cache run when a format is previewed.
        const KvFormat k = preview ? *preview : config.k_format;
        const KvFormat v = preview ? *preview : config.v_format;
        KvErrorHooks hooks;
        // Under token eviction the weights were captured above; this measures the storage error
        // of every position (an evicted one is greyed in the strip).
        if (!captured)
          (run_fp32 ? hooks.exact_observer : hooks.quantized_observer) = recorder.get();
        hooks.cancelled = [this] { return cancelled(); };
        try {
          std::optional<KvErrorProfile> p = measure_kv_error(transformer, tokens, k, v, bs, hooks);
          if (!p) return nullptr;
          cap->errors = std::make_unique<KvErrorProfile>(std::move(*p));
          captured = true;  // by this run's observer, or already by the eviction run
        } catch (const Error& e) {
          if (!preview) throw;          // the run's own formats: a real capture failure
          cap->errors_note = e.what();  // a preview this block size cannot store
        }
      }
      if (!captured) {
        // kWatchChunk tokens per engine step, the recorder handed each query's rows in order;
        // cancelling is seen between chunks.
        constexpr int kWatchChunk = 32;
        SoloSequence seq(kv_layout_for(c, bs, 1, config.k_format, config.v_format), n);
        for (int begin = 0; begin < n; begin += kWatchChunk) {
          if (cancelled()) return nullptr;
          const int count = std::min(kWatchChunk, n - begin);
          seq.watch(transformer, std::span<const int>(tokens).subspan(begin, count), *recorder);
        }
      }
      cap->sinks = recorder->detect_sinks();
      cap->recorder = std::move(recorder);
    } catch (const std::exception& e) {
      cap->error = e.what();
    }
    return cap;
  });
}

}  // namespace kvscope::ui

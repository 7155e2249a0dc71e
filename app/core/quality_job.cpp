// QualityJob: the background sweep: the fp32 reference once, then formats, MLA ranks, eviction.
#include "app/core/quality_job.h"

#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "app/core/quality_cache.h"
#include "app/core/quality_shipped.h"
#include "engine/analysis/eviction_quality.h"
#include "engine/backend/backend.h"
#include "engine/common/error.h"
#include "engine/infer/transformer.h"
#include "engine/kv/kv_format.h"
#include "engine/mla/mla_codec.h"

namespace kvscope::ui {

namespace {

struct Cancelled {};

// The shipped results for this sweep, labelled, or null (no file holds these inputs, or a file
// cannot be hashed: the sweep then runs as without shipped files).
std::shared_ptr<const QualitySweep> shipped_preview(const Model& model, const Tokenizer& tokenizer,
                                                    const std::string& text_path, long max_tokens,
                                                    int block_size, const std::string& dir,
                                                    const std::string& mla_note) {
  try {
    std::optional<ShippedSweep> found = find_shipped_sweep(
        dir, shipped_sweep_key(model, tokenizer, text_path, max_tokens, block_size), nullptr);
    if (!found) return nullptr;
    auto sweep = std::make_shared<QualitySweep>(std::move(found->sweep));
    // The file records file names; the panel names this machine's model and text.
    sweep->model = model.source();
    sweep->source = text_path;
    sweep->mla_note = mla_note;
    sweep->shipped_note = shipped_note(*found);
    sweep->shipped_detail = shipped_detail(*found);
    return sweep;
  } catch (const std::exception&) {
    return nullptr;
  }
}

}  // namespace

void QualityJob::start(std::shared_ptr<const Model> model,
                       std::shared_ptr<const Tokenizer> tokenizer, std::string text_path,
                       long max_tokens, int block_size, std::string cache_dir, bool reuse,
                       std::string shipped_dir) {
  if (busy()) return;
  steps_done_ = 0;
  total_steps_ = 1 + (model ? sweep_num_variants(model->config()) : 0);
  fraction_ = 0.0f;
  {
    std::lock_guard<std::mutex> lock(preview_mutex_);
    preview_.reset();
  }
  launch([this, model = std::move(model), tokenizer = std::move(tokenizer),
          text_path = std::move(text_path), max_tokens, block_size,
          cache_dir = std::move(cache_dir), reuse, shipped_dir = std::move(shipped_dir)] {
    // Why this model's sweep has no MLA points ("" when it has them), for cached and fresh sweeps.
    const std::string mla_note =
        model ? sweep_mla_skip_note(model->config(), model->source()) : std::string();
    // The disk cache: the same inputs give the same sweep. A file that does not load (missing,
    // torn, another key) is recomputed and rewritten.
    std::string key, cache_path;
    if (!cache_dir.empty() && model && !model->is_random_weights()) {
      key = sweep_cache_key(model->source(), text_path, max_tokens, block_size,
                            sweep_variants_text(model->config(), block_size));
      if (!key.empty()) cache_path = sweep_cache_path(cache_dir, key);
    }
    if (!cache_path.empty() && reuse) {
      if (std::optional<QualitySweep> cached = load_sweep_cache(cache_path, key, nullptr)) {
        auto sweep = std::make_shared<QualitySweep>(std::move(*cached));
        sweep->from_cache = true;
        sweep->cache_note = "from the disk cache " + cache_path;
        sweep->mla_note = mla_note;
        steps_done_ = total_steps_.load();
        return sweep;
      }
    }
    // Computed from here on. Shipped results for the same inputs are shown meanwhile, and each
    // point finished below takes its shipped one's place (same series and label).
    std::shared_ptr<const QualitySweep> shown;
    if (!shipped_dir.empty() && model && tokenizer && !model->is_random_weights()) {
      shown = shipped_preview(*model, *tokenizer, text_path, max_tokens, block_size, shipped_dir,
                              mla_note);
    }
    const auto publish = [this](std::shared_ptr<const QualitySweep> s) {
      std::lock_guard<std::mutex> lock(preview_mutex_);
      preview_ = std::move(s);
    };
    if (shown) publish(shown);
    const auto refine = [&](const QualityPoint& p) {
      if (!shown) return;
      auto next = std::make_shared<QualitySweep>(*shown);
      QualitySweep one;
      one.points.push_back(p);
      merge_sweep(*next, one);
      ++next->points_recomputed;
      shown = next;
      publish(std::move(next));
    };
    auto sweep = std::make_shared<QualitySweep>();
    sweep->model = model ? model->source() : std::string();
    sweep->block_size = block_size;
    const auto progress = [this](long done, long total) {
      if (cancelled()) throw Cancelled{};
      fraction_ = total > 0 ? static_cast<float>(done) / static_cast<float>(total) : 0.0f;
    };
    const auto step_done = [this] {
      if (cancelled()) throw Cancelled{};
      fraction_ = 0.0f;
      ++steps_done_;
    };
    try {
      if (!model || !tokenizer) throw Error("quality", "no model with a tokenizer is loaded");
      if (model->is_random_weights())
        throw Error(model->source(), "random weights: no quality figure is meaningful");
      auto backend = make_cpu_backend(1);
      Transformer transformer(model, *backend);
      QualityEvaluator evaluator(
          transformer,
          quality_eval_windows(*tokenizer, text_path, model->config().seq_len, max_tokens),
          block_size, progress);
      step_done();
      sweep->source = text_path;
      sweep->windows = static_cast<int>(evaluator.windows().size());
      sweep->positions = evaluator.num_positions();
      std::vector<std::unique_ptr<CacheVariant>> formats;
      for (const auto& [k, v] : sweep_formats()) {
        formats.push_back(make_kv_format_variant(parse_kv_format(k, "sweep"),
                                                 parse_kv_format(v, "sweep"), block_size));
      }
      const std::vector<int> ranks = sweep_mla_ranks(model->config());
      std::vector<std::unique_ptr<CacheVariant>> mlas;
      for (int rank : ranks) {
        MlaOptions o;
        o.mode = MlaMode::kReconstruct;
        o.rank = rank;
        auto codec = std::make_shared<const MlaCodec>(make_mla_codec(*model, o));
        mlas.push_back(make_mla_variant(codec, KvFormat{}, block_size));
      }
      const std::vector<EvictionRunOptions> evictions = sweep_evictions(block_size);
      std::vector<std::unique_ptr<EvictionVariant>> evicts;
      for (const EvictionRunOptions& o : evictions)
        evicts.push_back(std::make_unique<EvictionVariant>(o));
      std::vector<CacheVariant*> all;
      for (const auto& v : formats) all.push_back(v.get());
      for (const auto& v : mlas) all.push_back(v.get());
      for (const auto& v : evicts) all.push_back(v.get());
      // Variant i's point: formats, then MLA ranks, then eviction runs.
      const auto point_of = [&](std::size_t i, const QualityReport& r) {
        if (i < formats.size()) return format_point(r);
        if (i < formats.size() + mlas.size()) return mla_point(r, ranks[i - formats.size()]);
        const std::size_t e = i - formats.size() - mlas.size();
        return eviction_point(r, evictions[e], evicts[e]->stats().peak_bytes_per_context_token());
      };
      const int before = steps_done_.load();
      const auto runs_progress = [&](long done, long total) {
        if (cancelled()) throw Cancelled{};
        const double runs = total > 0 ? static_cast<double>(done) / static_cast<double>(total) *
                                            static_cast<double>(all.size())
                                      : 0.0;
        steps_done_ = before + static_cast<int>(runs);
        fraction_ = static_cast<float>(runs - std::floor(runs));
      };
      // Every point in one evaluate_all: the formats and MLA ranks run a window in chunks, one
      // after another; the KIVI formats (a token per step anyway) and the eviction runs go in
      // lockstep, one engine step per position for all of them, the weights read once per
      // position instead of once per run. The bar advances a run at a time. Each point run
      // alone takes its shipped one's place as soon as its report is final; the lockstep ones
      // finish together at the end, with the whole sweep.
      const std::vector<QualityReport> reports = evaluator.evaluate_all(
          all, runs_progress, {}, [&](std::size_t i, const QualityReport& r) {
            if (!all[i]->has_stepper()) refine(point_of(i, r));
          });
      for (std::size_t i = 0; i < all.size(); ++i) sweep->points.push_back(point_of(i, reports[i]));
      sweep->reference_bytes_per_token = sweep->points.front().bytes_per_token;
      sweep->mla_note = mla_note;
      steps_done_ = before + static_cast<int>(all.size());
      fraction_ = 0.0f;
    } catch (const Cancelled&) {
      return std::shared_ptr<QualitySweep>();
    } catch (const std::exception& e) {
      sweep->points.clear();
      sweep->error = e.what();
    }
    if (!cache_path.empty() && sweep->error.empty()) {
      try {
        save_sweep_cache(cache_path, key, *sweep);
        sweep->cache_note = "cached in " + cache_path;
      } catch (const std::exception& e) {
        sweep->cache_note = std::string("not cached: ") + e.what();
      }
    }
    return sweep;
  });
}

}  // namespace kvscope::ui

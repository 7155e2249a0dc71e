// QualityJob: the background sweep: the fp32 reference once, then formats, MLA ranks, eviction.
#include "app/core/quality_job.h"

#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <string>
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

// The shipped results for this sweep, labelled, or null (no shipped directory, no trained model
// with a tokenizer, no file holds these inputs, or a file cannot be hashed: the sweep then runs
// as without shipped files).
std::shared_ptr<const QualitySweep> shipped_preview(const Model* model, const Tokenizer* tokenizer,
                                                    const std::string& text_path, long max_tokens,
                                                    int block_size, const std::string& dir,
                                                    const std::string& mla_note) {
  if (dir.empty() || !model || !tokenizer || model->is_random_weights()) return nullptr;
  try {
    std::optional<ShippedSweep> found = find_shipped_sweep(
        dir, shipped_sweep_key(*model, *tokenizer, text_path, max_tokens, block_size), nullptr);
    if (!found) return nullptr;
    auto sweep = std::make_shared<QualitySweep>(std::move(found->sweep));
    // The file records file names; the panel names this machine's model and text.
    sweep->model = model->source();
    sweep->source = text_path;
    sweep->mla_note = mla_note;
    sweep->shipped_note = shipped_note(*found);
    sweep->shipped_detail = shipped_detail(*found);
    return sweep;
  } catch (const std::exception&) {
    return nullptr;
  }
}

// The disk cache file for these inputs; both empty when there is none (no directory, no model,
// random weights, or inputs that cannot be keyed).
struct SweepCacheFile {
  std::string key, path;
};

SweepCacheFile sweep_cache_file(const Model* model, const std::string& text_path, long max_tokens,
                                int block_size, const std::string& cache_dir) {
  SweepCacheFile file;
  if (!cache_dir.empty() && model && !model->is_random_weights()) {
    file.key = sweep_cache_key(model->source(), text_path, max_tokens, block_size,
                               sweep_variants_text(model->config(), block_size));
    if (!file.key.empty()) file.path = sweep_cache_path(cache_dir, file.key);
  }
  return file;
}

// The sweep cached in `file`, or null when it does not load (missing, torn, another key).
std::shared_ptr<QualitySweep> cached_sweep(const SweepCacheFile& file,
                                           const std::string& mla_note) {
  std::optional<QualitySweep> cached = load_sweep_cache(file.path, file.key, nullptr);
  if (!cached) return nullptr;
  auto sweep = std::make_shared<QualitySweep>(std::move(*cached));
  sweep->from_cache = true;
  sweep->cache_note = "from the disk cache " + file.path;
  sweep->mla_note = mla_note;
  return sweep;
}

// Writes a finished sweep to the disk cache and says so (or why not) in its cache note.
void save_to_cache(const SweepCacheFile& file, QualitySweep& sweep) {
  try {
    save_sweep_cache(file.path, file.key, sweep);
    sweep.cache_note = "cached in " + file.path;
  } catch (const std::exception& e) {
    sweep.cache_note = std::string("not cached: ") + e.what();
  }
}

// Every variant of the sweep: KV formats, then MLA ranks, then eviction runs.
struct SweepVariants {
  std::vector<std::unique_ptr<CacheVariant>> formats;
  std::vector<int> ranks;
  std::vector<std::unique_ptr<CacheVariant>> mlas;
  std::vector<EvictionRunOptions> evictions;
  std::vector<std::unique_ptr<EvictionVariant>> evicts;
  std::vector<CacheVariant*> all;

  // Variant i's point: formats, then MLA ranks, then eviction runs.
  QualityPoint point_of(std::size_t i, const QualityReport& r) const {
    if (i < formats.size()) return format_point(r);
    if (i < formats.size() + mlas.size()) return mla_point(r, ranks[i - formats.size()]);
    const std::size_t e = i - formats.size() - mlas.size();
    return eviction_point(r, evictions[e], evicts[e]->stats().peak_bytes_per_context_token());
  }
};

SweepVariants make_sweep_variants(const Model& model, int block_size) {
  SweepVariants v;
  for (const auto& [k, f] : sweep_formats()) {
    v.formats.push_back(make_kv_format_variant(parse_kv_format(k, "sweep"),
                                               parse_kv_format(f, "sweep"), block_size));
  }
  v.ranks = sweep_mla_ranks(model.config());
  for (int rank : v.ranks) {
    MlaOptions o;
    o.mode = MlaMode::kReconstruct;
    o.rank = rank;
    auto codec = std::make_shared<const MlaCodec>(make_mla_codec(model, o));
    v.mlas.push_back(make_mla_variant(codec, KvFormat{}, block_size));
  }
  v.evictions = sweep_evictions(block_size);
  for (const EvictionRunOptions& o : v.evictions)
    v.evicts.push_back(std::make_unique<EvictionVariant>(o));
  for (const auto& x : v.formats) v.all.push_back(x.get());
  for (const auto& x : v.mlas) v.all.push_back(x.get());
  for (const auto& x : v.evicts) v.all.push_back(x.get());
  return v;
}

// The shipped results shown, with point `p`, computed live, in its shipped one's place.
std::shared_ptr<const QualitySweep> with_recomputed_point(const QualitySweep& shown,
                                                          const QualityPoint& p) {
  auto next = std::make_shared<QualitySweep>(shown);
  QualitySweep one;
  one.points.push_back(p);
  merge_sweep(*next, one);
  ++next->points_recomputed;
  return next;
}

// Runs finished (and the fraction of the next) after `done` of `total` engine steps of all runs.
double runs_done(long done, long total, std::size_t num_runs) {
  return total > 0 ? static_cast<double>(done) / static_cast<double>(total) *
                         static_cast<double>(num_runs)
                   : 0.0;
}

// What the evaluation reports back to the job as it goes.
struct SweepHooks {
  ProgressFn progress;              // within the fp32 reference
  std::function<void()> step_done;  // the reference is done
  std::function<void(long done, long total, std::size_t num_runs)> runs_progress;
  std::function<void(const QualityPoint&)> refine;  // a point run alone is final
};

// Evaluates every variant against the fp32 reference into `sweep`; throws Error when there is no
// model to evaluate (and whatever a hook throws).
void evaluate_sweep(const std::shared_ptr<const Model>& model, const Tokenizer* tokenizer,
                    const std::string& text_path, long max_tokens, int block_size,
                    const SweepHooks& hooks, QualitySweep& sweep) {
  if (!model || !tokenizer) throw Error("quality", "no model with a tokenizer is loaded");
  if (model->is_random_weights())
    throw Error(model->source(), "random weights: no quality figure is meaningful");
  auto backend = make_cpu_backend(1);
  Transformer transformer(model, *backend);
  QualityEvaluator evaluator(
      transformer, quality_eval_windows(*tokenizer, text_path, model->config().seq_len, max_tokens),
      block_size, hooks.progress);
  hooks.step_done();
  sweep.source = text_path;
  sweep.windows = static_cast<int>(evaluator.windows().size());
  sweep.positions = evaluator.num_positions();
  const SweepVariants variants = make_sweep_variants(*model, block_size);
  const std::vector<CacheVariant*>& all = variants.all;
  // Every point in one evaluate_all: the formats (KIVI's too, through the sequence's decoded
  // copy) and MLA ranks run a window in chunks, one after another; the eviction runs go in
  // lockstep, one engine step per position for all of them, the weights read once per
  // position instead of once per run. The bar advances a run at a time. Each point run
  // alone takes its shipped one's place as soon as its report is final; the lockstep ones
  // finish together at the end, with the whole sweep.
  const std::vector<QualityReport> reports = evaluator.evaluate_all(
      all, [&](long done, long total) { hooks.runs_progress(done, total, all.size()); }, {},
      [&](std::size_t i, const QualityReport& r) {
        if (!all[i]->has_stepper()) hooks.refine(variants.point_of(i, r));
      });
  for (std::size_t i = 0; i < all.size(); ++i)
    sweep.points.push_back(variants.point_of(i, reports[i]));
  sweep.reference_bytes_per_token = sweep.points.front().bytes_per_token;
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
    const SweepCacheFile cache =
        sweep_cache_file(model.get(), text_path, max_tokens, block_size, cache_dir);
    if (!cache.path.empty() && reuse) {
      if (std::shared_ptr<QualitySweep> sweep = cached_sweep(cache, mla_note)) {
        steps_done_ = total_steps_.load();
        return sweep;
      }
    }
    // Computed from here on. Shipped results for the same inputs are shown meanwhile, and each
    // point finished below takes its shipped one's place (same series and label).
    std::shared_ptr<const QualitySweep> shown = shipped_preview(
        model.get(), tokenizer.get(), text_path, max_tokens, block_size, shipped_dir, mla_note);
    const auto publish = [this](std::shared_ptr<const QualitySweep> s) {
      std::lock_guard<std::mutex> lock(preview_mutex_);
      preview_ = std::move(s);
    };
    if (shown) publish(shown);
    auto sweep = std::make_shared<QualitySweep>();
    sweep->model = model ? model->source() : std::string();
    sweep->block_size = block_size;
    int before = 0;  // steps done when the variant runs start
    SweepHooks hooks;
    hooks.progress = [this](long done, long total) {
      if (cancelled()) throw Cancelled{};
      fraction_ = total > 0 ? static_cast<float>(done) / static_cast<float>(total) : 0.0f;
    };
    hooks.step_done = [this, &before] {
      if (cancelled()) throw Cancelled{};
      fraction_ = 0.0f;
      before = ++steps_done_;
    };
    hooks.runs_progress = [this, &before](long done, long total, std::size_t num_runs) {
      if (cancelled()) throw Cancelled{};
      const double runs = runs_done(done, total, num_runs);
      steps_done_ = before + static_cast<int>(runs);
      fraction_ = static_cast<float>(runs - std::floor(runs));
    };
    hooks.refine = [&](const QualityPoint& p) {
      if (!shown) return;
      std::shared_ptr<const QualitySweep> next = with_recomputed_point(*shown, p);
      shown = next;
      publish(std::move(next));
    };
    try {
      evaluate_sweep(model, tokenizer.get(), text_path, max_tokens, block_size, hooks, *sweep);
      sweep->mla_note = mla_note;
      steps_done_ = before + static_cast<int>(sweep->points.size());
      fraction_ = 0.0f;
    } catch (const Cancelled&) {
      return std::shared_ptr<QualitySweep>();
    } catch (const std::exception& e) {
      sweep->points.clear();
      sweep->error = e.what();
    }
    if (!cache.path.empty() && sweep->error.empty()) save_to_cache(cache, *sweep);
    return sweep;
  });
}

}  // namespace kvscope::ui

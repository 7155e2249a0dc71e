// Reports for kvscope eval: one variant's report (JSON or text) and the sweep over every format
// (table on stdout, CSV and PNG Pareto plots in a directory).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/analysis/quality.h"
#include "engine/mla/mla_codec.h"
#include "engine/model/checkpoint.h"

namespace kvscope::cli {

nlohmann::json report_json(const QualityReport& r);
// The report's per-position buckets (EvalScope::bucket_size), one object each.
nlohmann::json buckets_json(const QualityReport& r);

// One variant (eval format, eval mla) evaluated against the reference and reported on stdout
// (JSON or text): windows from `source`, the model's weight format, and with `codec` the MLA
// rank and energy kept. Returns the exit code.
int report_one_variant(const QualityEvaluator& evaluator, CacheVariant& variant, const Model& model,
                       const std::string& source, int block_size, const MlaCodec* codec, bool json);

// Evaluates every rung of the format ladder (quant::kv_format_sweep(), fp32 first) and returns
// the reports in ladder order.
std::vector<QualityReport> evaluate_format_sweep(const QualityEvaluator& evaluator, int block_size);

// Evaluates every format of the sweep list and writes <out>/quant_sweep.csv,
// <out>/quant_pareto_kl.png and <out>/quant_pareto_ppl.png. Returns the exit code.
int run_sweep(const QualityEvaluator& evaluator, const ModelConfig& c, int block_size,
              const std::string& source, const std::string& out_dir, bool json);

// What --mla-sweep runs; an empty list means the default.
struct MlaSweepChoice {
  // --mla-series: comma list of a (fp32 latents), a-fp16, bD (mode B, D rotary dims per KV head,
  // the fastest pairs) and bD-norm (pairs chosen by weight norm). Default: a, a-fp16, and mode B
  // with head_dim - 2, head_dim / 2 and 2 rotary dims, and 2 by norm.
  std::string series;
  // --mla-ranks: comma list of ranks or "full", applied to every series (a rank above a series'
  // full rank is an error). Default: eighths of each series' full rank.
  std::string ranks;
};

// Checks --mla-series and --mla-ranks against the model's shape (kvscope::Error naming the
// flag), so that a bad choice fails before the reference run.
void check_mla_sweep_choice(const MlaSweepChoice& choice, const ModelConfig& c);

// --mla-sweep (eval_mla.cpp): MLA modes A and B over ranks, with the formats on the same plots;
// writes <out>/mla_sweep.csv, mla_pareto_kl.png and mla_pareto_ppl.png.
int run_mla_sweep(const QualityEvaluator& evaluator, const Model& model, int block_size,
                  const MlaSweepChoice& choice, const std::string& source,
                  const std::string& out_dir, bool json);

}  // namespace kvscope::cli

// Reports for kvscope eval: the JSON form of one QualityReport and the --sweep over every format
// (table on stdout, CSV and PNG Pareto plots in a directory).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "engine/analysis/quality.h"

namespace kvscope::cli {

nlohmann::json report_json(const QualityReport& r);

// Evaluates every format of the sweep list and writes <out>/quant_sweep.csv,
// <out>/quant_pareto_kl.png and <out>/quant_pareto_ppl.png. Returns the exit code.
int run_sweep(const QualityEvaluator& evaluator, const ModelConfig& c, int block_size,
              const std::string& source, const std::string& out_dir, bool json);

}  // namespace kvscope::cli

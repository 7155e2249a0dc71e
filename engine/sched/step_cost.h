// The modelled clock of a serving run: each engine step priced on a named GPU by the roofline
// (the step takes as long as the larger of its HBM traffic over the memory bandwidth and its
// arithmetic over the peak tensor rate). A lower bound: no kernel launches, no scheduler time, no
// imperfect overlap, which on a small model are most of a real step. The disaggregated run
// (engine/sched/disagg.h) uses it to put steps and link transfers on one time axis.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "engine/common/config.h"

namespace kvscope {

struct GpuRoofline {
  std::string name;
  double hbm_bytes_per_second = 0.0;
  double flops_per_second = 0.0;  // dense bf16 tensor-core peak
  std::string what;               // where the figures come from
};

// h100 (SXM), h200, in that order.
const std::vector<GpuRoofline>& gpu_rooflines();
// A preset's name; throws kvscope::Error naming `where`, the value and the names.
GpuRoofline parse_gpu(const std::string& name, const std::string& where);

// One sequence's share of a step: it runs positions [first, first + tokens).
struct StepRun {
  int first = 0;
  int tokens = 0;
};

struct StepCost {
  double weight_bytes = 0;  // every parameter read once in bf16 (0 for a step with no tokens)
  double kv_bytes = 0;      // each sequence's cache read once, and the new tokens' K/V written
  double flops = 0;         // 2 x parameters per token, plus attention: 4 x heads x head_dim per
                            // (query, key) pair at every layer, causally
  double seconds = 0;       // max(bytes / HBM bandwidth, flops / peak)
};

// Prices a step of `runs` of `model` whose cache holds `kv_bytes_per_token` bytes a token (all
// layers, K and V, in the run's format).
StepCost price_step(const ModelConfig& model, double kv_bytes_per_token, const GpuRoofline& gpu,
                    std::span<const StepRun> runs);

}  // namespace kvscope

// The roofline price of one engine step.
#include "engine/sched/step_cost.h"

#include <algorithm>

#include "engine/common/error.h"

namespace kvscope {

const std::vector<GpuRoofline>& gpu_rooflines() {
  static const std::vector<GpuRoofline> presets = {
      {"h100", 3.35e12, 989e12, "H100 SXM: 3.35 TB/s HBM3, 989 TFLOPS dense bf16 (datasheet)"},
      {"h200", 4.8e12, 989e12, "H200 SXM: 4.8 TB/s HBM3e, 989 TFLOPS dense bf16 (datasheet)"},
  };
  return presets;
}

GpuRoofline parse_gpu(const std::string& name, const std::string& where) {
  std::string names;
  for (const GpuRoofline& g : gpu_rooflines()) {
    if (g.name == name) return g;
    if (!names.empty()) names += ", ";
    names += g.name;
  }
  fail_expected(where, "a GPU (" + names + ")", name);
}

StepCost price_step(const ModelConfig& model, double kv_bytes_per_token, const GpuRoofline& gpu,
                    std::span<const StepRun> runs) {
  StepCost c;
  double tokens = 0;
  double pairs = 0;  // (query, key) pairs: a query at position p attends keys 0..p
  for (const StepRun& r : runs) {
    if (r.tokens <= 0) continue;
    tokens += r.tokens;
    const double first = r.first;
    const double last = r.first + r.tokens - 1;
    pairs += (first + last + 2) * r.tokens / 2;  // sum of p + 1 over the run
    c.kv_bytes += (last + 1) * kv_bytes_per_token + r.tokens * kv_bytes_per_token;
  }
  if (tokens == 0) return c;
  const auto params = static_cast<double>(model.num_params());
  c.weight_bytes = 2.0 * params;
  c.flops = 2.0 * params * tokens + 4.0 * model.n_layers * model.n_heads * model.head_dim() * pairs;
  c.seconds = std::max((c.weight_bytes + c.kv_bytes) / gpu.hbm_bytes_per_second,
                       c.flops / gpu.flops_per_second);
  return c;
}

}  // namespace kvscope

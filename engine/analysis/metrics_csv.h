// metrics.csv: one row per step with every StepMetrics field plus the derived ratios.
#pragma once

#include <span>
#include <string>

#include "engine/trace/timeline.h"

namespace kvscope {

// Written atomically; throws kvscope::Error naming `path` when it cannot be written.
void write_metrics_csv(const std::string& path, std::span<const StepMetrics> metrics);

}  // namespace kvscope

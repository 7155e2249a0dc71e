// The headless report of a finished run: report.md (what happened, in plain words, with the key
// figures and plots), report.json (every per-step metric plus the summary) and PNG plots, each
// file written atomically into the output directory.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/common/config.h"
#include "engine/report/memory_wall_report.h"
#include "engine/sched/simulator.h"
#include "engine/trace/timeline.h"

namespace kvscope {

// What the report says about where the run came from.
struct RunReportInfo {
  std::string title;              // the scenario's title
  std::string description;        // the scenario's description ("" when it has none)
  std::string scenario_path;      // as given on the command line
  std::string model_name;         // "stories260K.bin", "synthetic:llama-3-70b (random weights)"
  bool random_weights = false;    // a synthetic model (also true when the Timeline says so)
  bool bookkeeping_only = false;  // no forward pass: tokens are 0, only block accounting is real
  std::string command;            // the command line that produced the run (quoted in the report)
};

// Whole-run figures derived from the per-step metrics (the numbers the report prints).
//   block-level occupancy = blocks_used / blocks_total
//   token-level occupancy = slots_filled / (blocks_total x block_size)
//   slot utilization      = slots_filled / slots_allocated (steps with allocated slots only)
struct RunFigures {
  int steps = 0;
  int blocks_total = 0;
  int block_size = 0;
  std::int64_t prefill_tokens = 0;  // summed over steps (recomputed tokens included)
  std::int64_t decode_tokens = 0;
  std::int64_t preemptions = 0;
  std::int64_t tokens_recomputed = 0;
  std::int64_t prompt_tokens = 0;      // of admitted requests (cumulative at the last step)
  std::int64_t prefix_hit_tokens = 0;  // served from the prefix cache = prefill tokens saved
  int finished = 0;
  int rejected = 0;
  double mean_running = 0;
  int peak_running = 0;
  // Occupancy and utilization.
  int peak_step = 0;  // the first step with the most blocks used
  int peak_blocks_used = 0;
  double peak_block_occupancy = 0, mean_block_occupancy = 0;
  std::int64_t peak_slots_filled = 0;  // the most tokens held at any step
  double peak_token_occupancy = 0, mean_token_occupancy = 0;
  double mean_slot_utilization = 1, min_slot_utilization = 1;
  // Waste.
  std::int64_t peak_internal_frag_slots = 0;
  double mean_internal_frag_slots = 0;
  std::int64_t peak_reservation_waste_slots = 0;
  double mean_reservation_waste_slots = 0;
  int min_largest_free_run = 0;  // smallest "largest run of consecutive free blocks"
  int min_largest_free_run_step = 0;
  int final_largest_free_run = 0;
  double peak_external_fragmentation = 0;
  std::int64_t peak_kv_bytes_used = 0;
  int peak_kv_bytes_step = 0;
  double prefill_saved_fraction() const {
    return prompt_tokens ? static_cast<double>(prefix_hit_tokens) / prompt_tokens : 0.0;
  }
};
// Throws kvscope::Error when `metrics` is empty or block_size < 1.
RunFigures run_figures(std::span<const StepMetrics> metrics, int block_size);

// Every per-step metric, the summary, the configuration and the per-request outcome.
nlohmann::json run_report_json(const RunReportInfo& info, const ModelConfig& shape,
                               const Simulator& sim);

// Writes report.md, report.json and the PNG plots into `out_dir` (which must exist), each
// atomically; `progress` (may be empty) is told each file as it is written. Returns the paths
// written. Throws kvscope::Error naming the file when one cannot be written.
std::vector<std::string> write_run_report(const RunReportInfo& info, const ModelConfig& shape,
                                          const Simulator& sim, const std::string& out_dir,
                                          const std::function<void(const std::string&)>& progress);

// Whether the report labels the run "random weights".
inline bool report_random_weights(const RunReportInfo& info, const Timeline& t) {
  return info.random_weights || t.header().random_weights;
}

// Pieces the writer uses (separate files; exposed for tests).
struct ReportPlot {
  std::string file;   // "utilization.png"
  std::string title;  // alt text
};
// Writes the plots for this run into out_dir; returns what was written, in order.
std::vector<ReportPlot> write_report_plots(const RunReportInfo& info, const ModelConfig& shape,
                                           const Simulator& sim, const RunFigures& figures,
                                           const std::string& out_dir,
                                           const std::function<void(const std::string&)>& progress);
// The memory wall the report shows for random-weight (published shape) models: fp16 weights,
// 1..8 GPUs of 80 GB, the run's KV format (fp16 when K and V differ), the trained context.
MemoryWallSpec report_memory_wall_spec(const RunReportInfo& info, const ModelConfig& shape,
                                       const SimConfig& config);
std::string run_report_markdown(const RunReportInfo& info, const ModelConfig& shape,
                                const Simulator& sim, const RunFigures& figures,
                                const std::vector<ReportPlot>& plots);

}  // namespace kvscope

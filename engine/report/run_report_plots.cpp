// The run report's PNG plots: occupancy, waste, free blocks and prefix hit rate over steps, and
// KV memory vs context for the model's shape with the run's measured point.
#include <algorithm>
#include <cmath>

#include "engine/analysis/memory_math.h"
#include "engine/report/memory_wall_report.h"
#include "engine/report/png_plot.h"
#include "engine/report/run_report.h"

namespace kvscope {
namespace {

std::string footnote(const RunReportInfo& info, bool random_weights) {
  std::string s = info.command.empty() ? "kvscope run " + info.scenario_path : info.command;
  if (random_weights) s += "   [random weights]";
  if (info.bookkeeping_only) s += "   [bookkeeping only]";
  return s;
}

PlotSeries over_steps(const std::string& label, std::span<const StepMetrics> metrics,
                      const std::function<double(const StepMetrics&)>& y) {
  PlotSeries s;
  s.label = label;
  for (const StepMetrics& m : metrics) {
    s.x.push_back(m.step);
    s.y.push_back(y(m));
  }
  return s;
}

double pct(double num, double den) {
  return den > 0 ? 100.0 * num / den : 0.0;
}

PlotSpec utilization_plot(std::span<const StepMetrics> m, const RunFigures& f, double pool_slots) {
  PlotSpec util;
  util.title = "KV pool occupancy and utilization";
  util.x_label = "step";
  util.y_label = "percent";
  util.series = {
      over_steps("blocks used / pool blocks (block-level)", m,
                 [&](const StepMetrics& s) { return pct(s.blocks_used, f.blocks_total); }),
      over_steps("tokens held / pool slots (token-level)", m,
                 [&](const StepMetrics& s) {
                   return pct(static_cast<double>(s.slots_filled), pool_slots);
                 }),
      over_steps("tokens held / allocated slots", m,
                 [&](const StepMetrics& s) { return 100.0 * s.utilization(); })};
  return util;
}

PlotSpec fragmentation_plot(std::span<const StepMetrics> m, double pool_slots) {
  PlotSpec frag;
  frag.title = "Fragmentation and waste";
  frag.x_label = "step";
  frag.y_label = "percent";
  frag.series = {
      over_steps("internal: empty slots in last blocks / pool slots", m,
                 [&](const StepMetrics& s) {
                   return pct(static_cast<double>(s.internal_frag_slots), pool_slots);
                 }),
      over_steps("reservation waste / pool slots", m,
                 [&](const StepMetrics& s) {
                   return pct(static_cast<double>(s.reservation_waste_slots), pool_slots);
                 }),
      over_steps("external: 1 - largest free run / free blocks", m,
                 [&](const StepMetrics& s) { return 100.0 * s.external_fragmentation(); })};
  return frag;
}

PlotSpec free_blocks_plot(std::span<const StepMetrics> m, const RunFigures& f,
                          bool prefix_caching) {
  PlotSpec free;
  free.title = "Free blocks";
  free.x_label = "step";
  free.y_label = "blocks";
  free.series = {over_steps("free blocks", m, [](const StepMetrics& s) { return s.free_blocks; }),
                 over_steps("largest run of consecutive free blocks", m,
                            [](const StepMetrics& s) { return s.largest_free_run; })};
  if (prefix_caching) {
    free.series.push_back(over_steps("free but holding a cached prefix", m,
                                     [](const StepMetrics& s) { return s.blocks_cached_free; }));
  }
  free.h_lines = {
      {static_cast<double>(f.blocks_total), "pool: " + std::to_string(f.blocks_total) + " blocks"}};
  return free;
}

PlotSpec prefix_hit_plot(std::span<const StepMetrics> m) {
  PlotSpec hit;
  hit.title = "Prefix cache hit rate";
  hit.x_label = "step";
  hit.y_label = "% of prompt tokens from shared blocks";
  hit.h_lines = {{100.0, "every prompt token"}};
  hit.series = {over_steps("cumulative", m, [&](const StepMetrics& s) {
    return pct(static_cast<double>(s.prefix_hit_tokens), static_cast<double>(s.prompt_tokens));
  })};
  PlotSeries per_step{"admissions at this step", {}, {}, false, true};
  for (std::size_t i = 0; i < m.size(); ++i) {
    const std::int64_t prev_prompt = i ? m[i - 1].prompt_tokens : 0;
    const std::int64_t prev_hit = i ? m[i - 1].prefix_hit_tokens : 0;
    const std::int64_t prompt = m[i].prompt_tokens - prev_prompt;
    if (prompt <= 0) continue;
    per_step.x.push_back(m[i].step);
    per_step.y.push_back(
        pct(static_cast<double>(m[i].prefix_hit_tokens - prev_hit), static_cast<double>(prompt)));
  }
  hit.series.push_back(per_step);
  return hit;
}

// KV bytes vs context for this shape: the textbook formula per format, the run's exact
// format, and the run's measured point (tokens held vs bytes allocated at the peak).
PlotSpec memory_vs_context_plot(const Timeline& t, const ModelConfig& shape, const RunFigures& f,
                                double pool_slots) {
  const std::span<const StepMetrics> m = t.all_metrics();
  PlotSpec mem;
  mem.title = "KV cache bytes vs tokens cached";
  mem.x_label = "tokens";
  mem.y_label = "bytes (1 GB = 1e9 B; 1 GiB = 1.074 GB)";
  mem.log_x = mem.log_y = true;
  const double pool_bytes = t.header().kv_bytes_per_token * pool_slots;
  const double x_max = std::max({65536.0, static_cast<double>(shape.seq_len), 2.0 * pool_slots});
  const struct {
    const char* name;
    double bytes;
  } formats[] = {{"fp32", 4}, {"fp16", 2}, {"int8 / fp8", 1}, {"int4", 0.5}};
  for (const auto& fmt : formats) {
    PlotSeries s;
    s.label = std::string(fmt.name) + ": " +
              format_count(static_cast<std::int64_t>(kv_bytes_per_token(shape, fmt.bytes))) +
              " B/token";
    for (double x = 16; x <= x_max * 1.0001; x *= 2) {
      s.x.push_back(x);
      s.y.push_back(kv_bytes_per_token(shape, fmt.bytes) * x);
    }
    mem.series.push_back(s);
  }
  if (f.peak_kv_bytes_used > 0) {
    const StepMetrics& at = m[static_cast<std::size_t>(
        std::find_if(m.begin(), m.end(),
                     [&](const StepMetrics& s) { return s.step == f.peak_kv_bytes_step; }) -
        m.begin())];
    PlotSeries point{"this run (" + t.header().kv_format + "), step " + std::to_string(at.step) +
                         ": " + std::to_string(at.slots_filled) + " tokens held, bytes allocated",
                     {static_cast<double>(at.slots_filled)},
                     {static_cast<double>(at.kv_bytes_used)},
                     false,
                     true};
    mem.series.push_back(point);
  }
  mem.h_lines = {{pool_bytes, "this run's pool: " + format_bytes(pool_bytes)}};
  return mem;
}

}  // namespace

MemoryWallSpec report_memory_wall_spec(const RunReportInfo& info, const ModelConfig& shape,
                                       const SimConfig& config) {
  MemoryWallSpec spec;
  spec.model_name = info.model_name;
  spec.shape = shape;
  spec.params = shape.num_params();
  spec.kv_format =
      config.k_format == config.v_format ? config.k_format : parse_kv_format("fp16", "report");
  spec.block_size = config.block_size;
  spec.context = shape.seq_len;
  return spec;
}

std::vector<ReportPlot> write_report_plots(
    const RunReportInfo& info, const ModelConfig& shape, const Simulator& sim, const RunFigures& f,
    const std::string& out_dir, const std::function<void(const std::string&)>& progress) {
  const Timeline& t = *sim.timeline();
  const std::span<const StepMetrics> m = t.all_metrics();
  const double pool_slots = static_cast<double>(f.blocks_total) * f.block_size;
  const std::string note = footnote(info, report_random_weights(info, t));
  std::vector<ReportPlot> plots;
  auto write = [&](PlotSpec& spec, const std::string& file) {
    spec.footnote = note;
    write_png_plot(spec, out_dir + "/" + file);
    plots.push_back({file, spec.title});
    if (progress) progress(out_dir + "/" + file);
  };

  PlotSpec util = utilization_plot(m, f, pool_slots);
  write(util, "utilization.png");
  PlotSpec frag = fragmentation_plot(m, pool_slots);
  write(frag, "fragmentation.png");
  const bool prefix_caching = sim.config().prefix_caching;
  PlotSpec free = free_blocks_plot(m, f, prefix_caching);
  write(free, "free_blocks.png");
  if (prefix_caching) {
    PlotSpec hit = prefix_hit_plot(m);
    write(hit, "prefix_hit_rate.png");
  }
  PlotSpec mem = memory_vs_context_plot(t, shape, f, pool_slots);
  write(mem, "memory_vs_context.png");

  if (report_random_weights(info, t)) {  // a published shape: the memory wall on 1..8 80 GB GPUs
    const MemoryWallSpec spec = report_memory_wall_spec(info, shape, sim.config());
    const std::string file = "memwall.png";
    write_memory_wall_png(spec, out_dir + "/" + file, note);
    plots.push_back({file, "Memory wall: tokens that fit beside the weights"});
    if (progress) progress(out_dir + "/" + file);
  }
  return plots;
}

}  // namespace kvscope

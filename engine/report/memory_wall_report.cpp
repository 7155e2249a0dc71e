// The memory wall table and plot: context and batch beside the weights on 1..G GPUs.
#include "engine/report/memory_wall_report.h"

#include <cstdio>
#include <sstream>

#include "engine/common/error.h"
#include "engine/report/png_plot.h"

namespace kvscope {
namespace {

std::string weights_line(const MemoryWallSpec& spec, const MemoryWall& wall) {
  char bytes[32];
  std::snprintf(bytes, sizeof bytes, "%g", spec.weight_bytes_per_param);
  std::string s = "weights: " + format_count(spec.params) + " parameters x " + bytes + " bytes (" +
                  spec.weight_dtype + ") = " + format_bytes(wall.weight_bytes);
  if (spec.params == spec.shape.num_params() && spec.shape.shared_classifier)
    s += " (parameters counted from the shape with the classifier tied to the embedding)";
  return s;
}

std::string formula_line(const MemoryWallSpec& spec, const MemoryWall& wall) {
  const ModelConfig& c = spec.shape;
  char buf[256];
  std::snprintf(
      buf, sizeof buf,
      "KV bytes per token (%s): 2 x %d layers x %d KV heads x %d head_dim x %g B/element = %s B",
      spec.kv_format.name().c_str(), c.n_layers, c.n_kv_heads, c.head_dim(),
      spec.kv_format.bits() / 8.0,
      format_count(static_cast<std::int64_t>(wall.kv_payload_bytes_per_token)).c_str());
  std::string s = buf;
  if (wall.kv_bytes_per_token != wall.kv_payload_bytes_per_token) {
    std::snprintf(buf, sizeof buf, "; with its scales (block %d): %.2f B", spec.block_size,
                  wall.kv_bytes_per_token);
    s += buf;
  }
  return s + " (" + format_bytes(wall.kv_bytes_per_token) + ")";
}

std::string gpu_line(const MemoryWallSpec& spec) {
  return "GPU memory: " + format_bytes(spec.gpu_bytes) +
         " each; weights split evenly, nothing else counted (activations, CUDA context and "
         "allocator slack come on top in a real server)";
}

}  // namespace

MemoryWall compute_memory_wall(const MemoryWallSpec& spec) {
  if (spec.params <= 0)
    fail_expected("parameters", "a positive count", std::to_string(spec.params));
  MemoryWall w;
  w.kv_payload_bytes_per_token = kv_bytes_per_token(spec.shape, spec.kv_format.bits() / 8.0);
  w.kv_bytes_per_token =
      kv_bytes_per_token_exact(spec.shape, spec.block_size, spec.kv_format, spec.kv_format);
  w.weight_bytes = static_cast<double>(spec.params) * spec.weight_bytes_per_param;
  w.rows = memory_wall(w.weight_bytes, w.kv_bytes_per_token, spec.gpu_bytes, spec.min_gpus,
                       spec.max_gpus, spec.context);
  return w;
}

std::string memory_wall_text(const MemoryWallSpec& spec, const MemoryWall& wall) {
  std::ostringstream o;
  o << formula_line(spec, wall) << "\n"
    << weights_line(spec, wall) << "\n"
    << gpu_line(spec) << "\n\n";
  char buf[320];
  const std::string batch = "max batch (" + format_count(spec.context) + " tokens each)";
  std::snprintf(buf, sizeof buf, "%4s  %-24s  %-24s  %-24s  %16s  %s\n", "GPUs", "memory",
                "weights", "left for the KV cache", "max tokens", batch.c_str());
  o << buf;
  for (const MemoryWallRow& r : wall.rows) {
    if (!r.weights_fit) {
      std::snprintf(buf, sizeof buf, "%4d  %-24s  %-24s  %-24s  %16s  %s\n", r.gpus,
                    format_bytes(r.total_bytes).c_str(), format_bytes(r.weight_bytes).c_str(),
                    "none: weights do not fit", "0", "0");
    } else {
      std::snprintf(buf, sizeof buf, "%4d  %-24s  %-24s  %-24s  %16s  %s\n", r.gpus,
                    format_bytes(r.total_bytes).c_str(), format_bytes(r.weight_bytes).c_str(),
                    format_bytes(r.kv_budget_bytes).c_str(), format_count(r.max_tokens).c_str(),
                    format_count(r.max_batch).c_str());
    }
    o << buf;
  }
  o << "(max tokens: one sequence's context, or the total over a batch; GiB = 2^30 bytes, GB = "
       "10^9 bytes)\n";
  return o.str();
}

std::string memory_wall_markdown(const MemoryWallSpec& spec, const MemoryWall& wall) {
  std::ostringstream o;
  o << "- " << formula_line(spec, wall) << "\n- " << weights_line(spec, wall) << "\n- "
    << gpu_line(spec)
    << "\n\n| GPUs | memory | weights | left for the KV cache | max tokens (one sequence, or a "
       "batch's total) | max batch of "
    << format_count(spec.context) << "-token sequences |\n|---|---|---|---|---|---|\n";
  for (const MemoryWallRow& r : wall.rows) {
    o << "| " << r.gpus << " | " << format_bytes(r.total_bytes) << " | "
      << format_bytes(r.weight_bytes) << " | "
      << (r.weights_fit ? format_bytes(r.kv_budget_bytes) : "none: the weights do not fit") << " | "
      << format_count(r.max_tokens) << " | " << format_count(r.max_batch) << " |\n";
  }
  o << "\n(GiB = 2^30 bytes, GB = 10^9 bytes.)\n";
  return o.str();
}

void write_memory_wall_png(const MemoryWallSpec& spec, const std::string& path,
                           const std::string& footnote) {
  PlotSpec plot;
  plot.title = "Memory wall: tokens that fit beside the weights";
  plot.x_label = "GPUs (" + format_bytes(spec.gpu_bytes) + " each)";
  plot.y_label = "KV tokens (one sequence or a batch's total)";
  std::vector<KvFormat> formats = {spec.kv_format};
  for (const char* name : {"fp16", "int8", "int4"}) {
    const KvFormat f = parse_kv_format(name, "memory wall");
    if (!(f == spec.kv_format)) formats.push_back(f);
  }
  for (const KvFormat& f : formats) {
    MemoryWallSpec s = spec;
    s.kv_format = f;
    const MemoryWall w = compute_memory_wall(s);
    PlotSeries series;
    series.label = "KV " + f.name() + " (" +
                   format_count(static_cast<std::int64_t>(w.kv_bytes_per_token)) +
                   " B/token, scales included)";
    series.markers = true;
    for (const MemoryWallRow& r : w.rows) {
      series.x.push_back(r.gpus);
      series.y.push_back(static_cast<double>(r.max_tokens));
    }
    plot.series.push_back(series);
  }
  plot.h_lines = {
      {static_cast<double>(spec.context), "one " + format_count(spec.context) + "-token sequence"}};
  plot.footnote = footnote;
  write_png_plot(plot, path);
}

}  // namespace kvscope

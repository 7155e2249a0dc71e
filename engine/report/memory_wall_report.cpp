// The memory wall table and plot: context and batch beside the weights on 1..G GPUs.
#include "engine/report/memory_wall_report.h"

#include <algorithm>
#include <cmath>
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

// "327,680 B" (a whole number of bytes) or "81,920.50 B".
std::string plain_bytes(double bytes) {
  if (bytes == std::floor(bytes)) return format_count(static_cast<std::int64_t>(bytes)) + " B";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f B", bytes);
  return buf;
}

// "64.00 MiB": format_bytes' binary figure alone, for the middle of a product.
std::string binary_bytes(double bytes) {
  const std::string both = format_bytes(bytes);
  return both.substr(0, both.find(" = "));
}

// The ring's time at one layer: each step's attention against its transfer, and the smallest
// chunk whose compute hides the transfer.
std::string ring_timing_text(const MemoryWallSpec& spec, const MemoryWall& wall) {
  const RingSplit& r = *wall.ring;
  const RingTiming& t = *wall.ring_timing;
  const ModelConfig& c = spec.shape;
  std::ostringstream o;
  char tf[32], gbs[32];
  std::snprintf(tf, sizeof tf, "%.4g", t.flops_per_second / 1e12);
  std::snprintf(gbs, sizeof gbs, "%.4g", t.link_bytes_per_second / 1e9);
  o << "  timing at " << tf << " TFLOPS a device (--tflops) over " << spec.ring_link.name << " at "
    << gbs << " GB/s one way (--link; " << spec.ring_link.what << "):\n";
  char flops[32];
  std::snprintf(flops, sizeof flops, "%.3g", t.step_flops);
  o << "    a step's attention: 4 x " << format_count(r.chunk_tokens) << "^2 x " << c.n_heads
    << " heads x " << c.head_dim() << " = " << flops << " FLOPs: " << format_time(t.compute_seconds)
    << "\n";
  if (r.devices == 1) {
    o << "    one device: nothing to hide; a layer's attention takes "
      << format_time(t.layer_seconds) << "\n";
    return o.str();
  }
  o << "    a step's transfer: " << binary_bytes(r.step_bytes) << " / " << gbs
    << " GB/s = " << format_time(t.transfer_seconds) << ": "
    << (t.hidden() ? "hidden behind the attention"
                   : "longer than the attention, " +
                         format_time(t.transfer_seconds - t.compute_seconds) + " exposed a step")
    << "\n";
  o << "    per layer: " << r.devices << " steps = " << format_time(t.layer_seconds)
    << " overlapped, " << format_time(t.layer_seconds_serial)
    << " if each transfer waited for its step\n";
  o << "    chunks of " << format_count(static_cast<std::int64_t>(std::ceil(t.min_chunk_tokens)))
    << " tokens or more hide the transfer (FLOPS x "
    << plain_bytes(r.step_bytes / static_cast<double>(r.chunk_tokens))
    << " a token at one layer / (4 x heads x head_dim x bandwidth); Ring Attention's c >= F/B "
       "for multi-head attention in bf16)\n";
  return o.str();
}

// The ring's split of one sequence, and whether each device's chunk fits in what the table's row
// for as many GPUs leaves it (the weights split over the same GPUs).
std::string ring_text(const MemoryWallSpec& spec, const MemoryWall& wall) {
  const RingSplit& r = *wall.ring;
  const int layers = spec.shape.n_layers;
  const bool even = r.tokens % r.devices == 0;
  std::ostringstream o;
  o << "ring attention: one sequence of " << format_count(r.tokens) << " tokens (--context) over "
    << r.devices << " devices (--ring), in chunks of " << format_count(r.chunk_tokens) << " tokens"
    << (even ? "" : " or one fewer (the largest counted)") << "\n";
  o << "  the sequence's KV cache: " << format_count(r.tokens) << " tokens x "
    << plain_bytes(wall.kv_bytes_per_token) << " = " << format_bytes(r.total_bytes) << "\n";
  o << "  each device keeps its chunk: " << format_count(r.chunk_tokens)
    << " tokens = " << format_bytes(r.device_bytes)
    << (even ? " (the cache / " : " (about the cache / ") << r.devices << ")\n";
  if (r.devices == 1) {
    o << "  one device: nothing travels\n";
  } else {
    o << "  each step, at each layer, every device passes the chunk it holds to the next: "
      << format_count(r.chunk_tokens) << " tokens x "
      << plain_bytes(wall.kv_bytes_per_token / layers)
      << " (one layer) = " << format_bytes(r.step_bytes) << "; " << r.steps_per_layer
      << " steps per layer\n";
    o << "  per pass over the " << layers << " layers each device sends " << r.steps_per_layer
      << " steps x " << layers << " layers x " << binary_bytes(r.step_bytes) << " = "
      << format_bytes(r.sent_per_device) << ", and holds " << format_bytes(r.buffer_bytes)
      << " of buffers (the visiting chunk and the arriving one)\n";
  }
  o << ring_timing_text(spec, wall);
  const auto row = std::find_if(wall.rows.begin(), wall.rows.end(),
                                [&](const MemoryWallRow& w) { return w.gpus == r.devices; });
  const double needed = r.device_bytes + r.buffer_bytes;
  if (row == wall.rows.end()) {
    o << "  (the table has no " << r.devices << "-GPU row to check the chunk against: --gpus)\n";
  } else if (!row->weights_fit) {
    o << "  on the table's " << row->gpus << "-GPU row the weights alone do not fit\n";
  } else {
    const double per_device = row->kv_budget_bytes / row->gpus;
    o << "  on the table's " << row->gpus << "-GPU row each GPU has " << format_bytes(per_device)
      << " beside its share of the weights: the chunk and buffers (" << format_bytes(needed) << ") "
      << (needed <= per_device ? "fit" : "do not fit") << "\n";
  }
  return o.str();
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
  if (spec.ring_devices > 0) {
    w.ring = ring_split(w.kv_bytes_per_token, spec.shape.n_layers, spec.context, spec.ring_devices);
    w.ring_timing = ring_timing(*w.ring, spec.shape.n_heads, spec.shape.head_dim(), spec.ring_flops,
                                spec.ring_link.bytes_per_second);
  }
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
  if (wall.ring) o << "\n" << ring_text(spec, wall);
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

// KV memory arithmetic: formula and exact bytes per token, block rounding, the memory wall, and
// byte formatting/parsing with explicit GB vs GiB.
#include "engine/analysis/memory_math.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

#include "engine/common/error.h"
#include "engine/kv/kv_storage.h"

namespace kvscope {

double payload_bytes_per_element(KvDtype dtype) {
  KvFormat f;
  f.dtype = dtype;
  return f.bits() / 8.0;
}

double kv_bytes_per_token(const ModelConfig& shape, double bytes_per_element) {
  return 2.0 * shape.n_layers * shape.n_kv_heads * shape.head_dim() * bytes_per_element;
}

double kv_bytes_per_token_exact(const ModelConfig& shape, int block_size, const KvFormat& k_format,
                                const KvFormat& v_format) {
  if (block_size < 1) fail_expected("block_size", "a positive integer", std::to_string(block_size));
  k_format.validate(block_size, shape.n_kv_heads, shape.head_dim(), "k_format");
  v_format.validate(block_size, shape.n_kv_heads, shape.head_dim(), "v_format");
  return kv_layout_for(shape, block_size, 1, k_format, v_format).bytes_per_token();
}

double mla_bytes_per_token(const ModelConfig& shape, double bytes_per_element) {
  if (shape.mla_kv_lora_rank <= 0) return 0.0;
  return static_cast<double>(shape.n_layers) * (shape.mla_kv_lora_rank + shape.mla_rope_dim) *
         bytes_per_element;
}

BlockFit paged_block_fit(std::int64_t tokens, int block_size) {
  if (block_size < 1) fail_expected("block_size", "a positive integer", std::to_string(block_size));
  if (tokens < 0) fail_expected("tokens", "a count >= 0", std::to_string(tokens));
  BlockFit f;
  f.blocks = (tokens + block_size - 1) / block_size;
  f.slots = f.blocks * block_size;
  f.wasted_slots = f.slots - tokens;
  f.utilization = f.slots == 0 ? 1.0 : static_cast<double>(tokens) / static_cast<double>(f.slots);
  return f;
}

double weight_bytes(const ModelConfig& shape, double bytes_per_param) {
  return static_cast<double>(shape.num_params()) * bytes_per_param;
}

std::vector<MemoryWallRow> memory_wall(double weights, double bytes_per_token, double gpu_bytes,
                                       int min_gpus, int max_gpus, std::int64_t context) {
  auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (!positive(weights))
    fail_expected("weight bytes", "a positive number", std::to_string(weights));
  if (!positive(bytes_per_token))
    fail_expected("KV bytes per token", "a positive number", std::to_string(bytes_per_token));
  if (!positive(gpu_bytes))
    fail_expected("GPU memory", "a positive size", std::to_string(gpu_bytes));
  if (min_gpus < 1 || max_gpus < min_gpus || max_gpus > 4096)
    fail_expected("GPU count range", "1 <= first <= last <= 4096",
                  std::to_string(min_gpus) + "-" + std::to_string(max_gpus));
  if (context < 1) fail_expected("context", "a positive token count", std::to_string(context));
  std::vector<MemoryWallRow> rows;
  for (int g = min_gpus; g <= max_gpus; ++g) {
    MemoryWallRow r;
    r.gpus = g;
    r.total_bytes = gpu_bytes * g;
    r.weight_bytes = weights;
    r.kv_budget_bytes = r.total_bytes - weights;
    r.weights_fit = r.kv_budget_bytes > 0;
    if (r.weights_fit) {
      const double tokens = std::floor(r.kv_budget_bytes / bytes_per_token);
      if (tokens >= static_cast<double>(std::numeric_limits<std::int64_t>::max()))
        fail_expected("GPU memory", "a size whose token count fits in 64 bits",
                      std::to_string(gpu_bytes));
      r.max_tokens = static_cast<std::int64_t>(tokens);
      r.max_batch = r.max_tokens / context;
    }
    rows.push_back(r);
  }
  return rows;
}

RingSplit ring_split(double bytes_per_token, int layers, std::int64_t tokens, int devices) {
  if (!std::isfinite(bytes_per_token) || bytes_per_token <= 0)
    fail_expected("KV bytes per token", "a positive number", std::to_string(bytes_per_token));
  if (layers < 1) fail_expected("layers", "a positive count", std::to_string(layers));
  if (tokens < 1) fail_expected("context", "a positive token count", std::to_string(tokens));
  if (devices < 1 || devices > 4096 || devices > tokens)
    fail_expected("ring devices",
                  "1 to 4096, and no more than the context's " + format_count(tokens) +
                      " tokens (every device holds at least one)",
                  std::to_string(devices));
  RingSplit r;
  r.devices = devices;
  r.tokens = tokens;
  r.chunk_tokens = (tokens + devices - 1) / devices;
  r.total_bytes = kv_bytes_at(bytes_per_token, tokens);
  r.device_bytes = kv_bytes_at(bytes_per_token, r.chunk_tokens);
  r.step_bytes = r.device_bytes / layers;
  r.steps_per_layer = devices - 1;
  r.sent_per_device = static_cast<double>(r.steps_per_layer) * layers * r.step_bytes;
  r.buffer_bytes = devices > 1 ? 2.0 * r.step_bytes : 0.0;
  return r;
}

RingTiming ring_timing(const RingSplit& ring, int heads, int head_dim, double flops_per_second,
                       double link_bytes_per_second) {
  if (heads < 1) fail_expected("attention heads", "a positive count", std::to_string(heads));
  if (head_dim < 1) fail_expected("head dim", "a positive size", std::to_string(head_dim));
  if (!std::isfinite(flops_per_second) || flops_per_second <= 0)
    fail_expected("device FLOPS", "a positive number", std::to_string(flops_per_second));
  if (!std::isfinite(link_bytes_per_second) || link_bytes_per_second <= 0)
    fail_expected("link bandwidth", "a positive number", std::to_string(link_bytes_per_second));
  RingTiming t;
  t.flops_per_second = flops_per_second;
  t.link_bytes_per_second = link_bytes_per_second;
  const auto c = static_cast<double>(ring.chunk_tokens);
  const double per_query_key = 4.0 * heads * head_dim;
  t.step_flops = per_query_key * c * c;
  t.compute_seconds = t.step_flops / flops_per_second;
  const int hops = ring.steps_per_layer;
  t.transfer_seconds = hops > 0 ? ring.step_bytes / link_bytes_per_second : 0.0;
  const double exposed_per_step = std::max(0.0, t.transfer_seconds - t.compute_seconds);
  t.exposed_seconds = hops * exposed_per_step;
  t.layer_seconds = ring.devices * t.compute_seconds + t.exposed_seconds;
  t.layer_seconds_serial = ring.devices * t.compute_seconds + hops * t.transfer_seconds;
  const double bytes_per_token_layer = ring.step_bytes / c;
  t.min_chunk_tokens =
      flops_per_second * bytes_per_token_layer / (per_query_key * link_bytes_per_second);
  return t;
}

std::string format_bytes(double bytes) {
  const char* binary[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  const char* decimal[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  char buf[96];
  const double a = std::fabs(bytes);
  if (!std::isfinite(bytes)) return "n/a";
  if (a < 1024.0) {
    std::snprintf(buf, sizeof buf, "%.0f B", bytes);
    return buf;
  }
  int u = 1, d = 1;  // largest unit with at least 1 of it (exact powers, no logarithms)
  while (u < 5 && a >= std::pow(1024.0, u + 1)) ++u;
  while (d < 5 && a >= std::pow(1000.0, d + 1)) ++d;
  std::snprintf(buf, sizeof buf, "%.2f %s = %.2f %s", bytes / std::pow(1024.0, u), binary[u],
                bytes / std::pow(1000.0, d), decimal[d]);
  return buf;
}

std::string format_time(double seconds) {
  char buf[32];
  if (seconds < 1e-3) {
    std::snprintf(buf, sizeof buf, "%.1f us", seconds * 1e6);
  } else if (seconds < 1.0) {
    std::snprintf(buf, sizeof buf, "%.2f ms", seconds * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f s", seconds);
  }
  return buf;
}

std::string format_ms(double seconds) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3f ms", seconds * 1e3);
  return buf;
}

double parse_byte_size(const std::string& text, const std::string& where) {
  const std::string expected =
      "a size with a unit, e.g. 80GB (10^9 bytes) or 80GiB (2^30 bytes); units B, KB, MB, GB, TB, "
      "KiB, MiB, GiB, TiB";
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  const std::string number = text.substr(0, i);
  std::size_t j = i;
  while (j < text.size() && text[j] == ' ') ++j;
  const std::string unit = text.substr(j);
  double value = 0;
  std::size_t used = 0;
  try {
    value = std::stod(number, &used);
  } catch (...) {
    used = 0;
  }
  if (number.empty() || used != number.size() || !std::isfinite(value) || value <= 0)
    fail_expected(where, expected, "'" + text + "'");
  struct Unit {
    const char* name;
    double scale;
  };
  const Unit units[] = {{"B", 1},           {"KB", 1e3},           {"MB", 1e6},
                        {"GB", 1e9},        {"TB", 1e12},          {"KiB", 1024.0},
                        {"MiB", 1048576.0}, {"GiB", kBytesPerGiB}, {"TiB", kBytesPerGiB * 1024.0}};
  for (const Unit& u : units) {
    if (unit == u.name) {
      const double bytes = value * u.scale;
      if (bytes < 1 || bytes > 1e18)
        fail_expected(where, "a size between 1 B and 1 EB", "'" + text + "'");
      return bytes;
    }
  }
  fail_expected(where, expected, "'" + text + "'");
}

}  // namespace kvscope

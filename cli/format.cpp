// Number formatting helpers.
#include "cli/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "engine/analysis/memory_math.h"
#include "engine/common/error.h"

namespace kvscope::cli {

const char* attention_kind(const ModelConfig& c) {
  if (c.n_kv_heads == c.n_heads) return "MHA";
  return c.n_kv_heads == 1 ? "MQA" : "GQA";
}

std::filesystem::path checked_out_dir(const std::string& out_dir) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw Error(out_dir, "cannot create the --out directory: " + ec.message());
  return out_dir;
}

std::string with_commas(std::int64_t value) {
  return format_count(value);  // engine/analysis/memory_math.h
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0f B", v);
  else if (u >= 3)
    std::snprintf(buf, sizeof buf, "%.2f %s (%.2f %s)", v, units[u], bytes / std::pow(1000.0, u),
                  u == 3 ? "GB" : "TB");
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

std::string huge_page_text(double fraction) {
  if (fraction < 0) return "huge pages: unknown (/proc/self/smaps unreadable)";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f%% on huge pages", 100.0 * fraction);
  return buf;
}

}  // namespace kvscope::cli

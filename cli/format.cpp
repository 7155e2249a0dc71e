// Number formatting helpers.
#include "cli/format.h"

#include <cmath>
#include <cstdio>

namespace kvscope::cli {

std::string with_commas(std::int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
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

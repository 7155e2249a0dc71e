// Number formatting helpers and the progress line.
#include "cli/format.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

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

ProgressLine::ProgressLine(std::string label)
    : label_(std::move(label)), enabled_(isatty(2) != 0) {}

ProgressLine::~ProgressLine() {
  if (enabled_ && shown_) std::fputs("\r\033[K", stderr);
}

void ProgressLine::operator()(long done, long total) {
  if (!enabled_ || total <= 0) return;
  const int percent = static_cast<int>(100 * std::clamp(done, 0L, total) / total);
  if (percent == last_percent_ && done != total) return;
  last_percent_ = percent;
  shown_ = true;
  constexpr int kWidth = 30;
  const int filled = kWidth * percent / 100;
  // \033[K clears what a longer label before it left on the line.
  std::fprintf(stderr, "\r%-24s [%s%s] %3d%% (%ld/%ld)\033[K", label_.c_str(),
               std::string(static_cast<std::size_t>(filled), '#').c_str(),
               std::string(static_cast<std::size_t>(kWidth - filled), '.').c_str(), percent, done,
               total);
  std::fflush(stderr);
}

}  // namespace kvscope::cli

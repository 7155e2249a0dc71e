// Tick placement, tick labels and CSV serialization for the plot widget.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "app/widgets/plot.h"

namespace kvscope::ui {

std::vector<double> linear_ticks(double lo, double hi, int max_ticks) {
  std::vector<double> ticks;
  if (!(hi > lo) || max_ticks < 1 || !std::isfinite(lo) || !std::isfinite(hi)) return ticks;
  const double raw = (hi - lo) / max_ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  const double first = std::ceil(lo / step - 1e-9) * step;
  for (double t = first; t <= hi + step * 1e-9 && ticks.size() < 64; t += step) {
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

std::vector<double> log_ticks(double lo, double hi, AxisUnits units) {
  std::vector<double> ticks;
  if (!(lo > 0) || !(hi > lo)) return ticks;
  const bool binary = units == AxisUnits::kBytes || units == AxisUnits::kTokens;
  const double base = binary ? 2.0 : 10.0;
  const double span = std::log(hi / lo) / std::log(base);
  // Binary axes: every power of 2 when the range is short, else powers of 4 or 1024-aligned.
  int stride = 1;
  if (binary) stride = span > 24 ? 4 : (span > 10 ? 2 : 1);
  const int k0 = static_cast<int>(std::floor(std::log(lo) / std::log(base)));
  const int k1 = static_cast<int>(std::ceil(std::log(hi) / std::log(base)));
  for (int k = k0; k <= k1; ++k) {
    if (binary && ((k % stride) + stride) % stride != 0) continue;
    const double t = std::pow(base, k);
    if (t >= lo * (1 - 1e-9) && t <= hi * (1 + 1e-9)) ticks.push_back(t);
  }
  if (!binary && span < 2.5) {  // few decades: add 2 and 5 multiples
    std::vector<double> more;
    for (int k = k0; k <= k1; ++k) {
      for (double m : {2.0, 5.0}) {
        const double t = m * std::pow(10.0, k);
        if (t >= lo && t <= hi) more.push_back(t);
      }
    }
    ticks.insert(ticks.end(), more.begin(), more.end());
    std::sort(ticks.begin(), ticks.end());
  }
  return ticks;
}

namespace {

std::string trim_number(double v, int max_decimals) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", max_decimals, v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  return s;
}

std::string scaled(double v, double unit_base, const char* const* units, int num_units) {
  int u = 0;
  while (std::fabs(v) >= unit_base && u < num_units - 1) {
    v /= unit_base;
    ++u;
  }
  return trim_number(v, std::fabs(v) < 10 ? 2 : 1) + units[u];
}

}  // namespace

std::string format_tick(double value, AxisUnits units) {
  switch (units) {
    case AxisUnits::kPercent:
      return trim_number(value * 100.0, 1) + "%";
    case AxisUnits::kBytes: {
      static const char* const kUnits[] = {" B", " KiB", " MiB", " GiB", " TiB", " PiB"};
      return scaled(value, 1024.0, kUnits, 6);
    }
    case AxisUnits::kTokens: {
      static const char* const kUnits[] = {"", "K", "M", "G"};
      return scaled(value, 1024.0, kUnits, 4);
    }
    case AxisUnits::kNumber: {
      static const char* const kUnits[] = {"", "k", "M", "G", "T"};
      if (std::fabs(value) < 1e-3 && value != 0.0) {  // tiny values (log axes): 1e-05
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.0e", value);
        return buf;
      }
      if (std::fabs(value) < 1.0 && value != 0.0) return trim_number(value, 3);
      return scaled(value, 1000.0, kUnits, 5);
    }
  }
  return trim_number(value, 3);
}

std::string plot_csv(std::span<const PlotSeries> series, const std::string& x_label,
                     const std::string& y_label) {
  const auto quote = [](const std::string& s) {
    std::string q = "\"";
    for (char c : s) q += (c == '"') ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  std::ostringstream out;
  out.precision(17);
  out << "series," << quote(x_label.empty() ? "x" : x_label) << ","
      << quote(y_label.empty() ? "y" : y_label) << "\n";
  for (const PlotSeries& s : series) {
    const std::size_t n = std::min(s.x.size(), s.y.size());
    for (std::size_t i = 0; i < n; ++i)
      out << quote(s.label) << "," << s.x[i] << "," << s.y[i] << "\n";
  }
  return out.str();
}

}  // namespace kvscope::ui

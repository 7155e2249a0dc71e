// PNG plot rendering: layout (title, axes, ticks, legend), series, reference lines, footnote.
#include "engine/report/png_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "engine/common/atomic_write.h"
#include "engine/common/error.h"
#include "engine/report/raster.h"

#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>

namespace kvscope {
namespace {

const Rgb kBackground{255, 255, 255};
const Rgb kInk{34, 38, 46};
const Rgb kGrid{228, 231, 236};
const Rgb kMuted{110, 116, 128};
// A colour-blind-friendly palette (Okabe-Ito order, slightly deepened for white paper).
const Rgb kPalette[] = {{0, 114, 178}, {213, 94, 0},   {0, 158, 115},  {204, 121, 167},
                        {230, 159, 0}, {86, 180, 233}, {120, 94, 240}, {90, 90, 90}};

struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
};

double axis_fraction(double v, double lo, double hi, bool log) {
  if (log) return (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
  return (v - lo) / (hi - lo);
}

Rgb series_color(std::size_t i) {
  return kPalette[i % (sizeof kPalette / sizeof kPalette[0])];
}

// Short tick labels: SI suffixes above a thousand (2K, 10M, 1.5G), plain decimals below.
std::string fmt_tick(double v) {
  char buf[32];
  const double a = std::fabs(v);
  const char* suffix[] = {"", "K", "M", "G", "T", "P"};
  int u = 0;
  double s = v;
  while (std::fabs(s) >= 1000.0 && u < 5) {
    s /= 1000.0;
    ++u;
  }
  if (u > 0)
    std::snprintf(buf, sizeof buf, "%.3g%s", s, suffix[u]);
  else if (a != 0 && a < 1e-3)
    std::snprintf(buf, sizeof buf, "%.0e", v);
  else if (v == std::floor(v))
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::vector<double> ticks(const Axis& ax) {
  std::vector<double> out;
  if (ax.log) {
    const double decades = std::log10(ax.hi / ax.lo);
    for (double p = std::floor(std::log10(ax.lo)); p <= std::ceil(std::log10(ax.hi)); p += 1) {
      for (double m : {1.0, 2.0, 5.0}) {
        if (m != 1.0 && decades > 3.5) continue;
        const double v = m * std::pow(10.0, p);
        if (v >= ax.lo && v <= ax.hi) out.push_back(v);
      }
    }
    return out;
  }
  const double raw = (ax.hi - ax.lo) / 6.0;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (mag * m >= raw) {
      step = mag * m;
      break;
    }
  }
  for (double v = std::ceil(ax.lo / step) * step; v <= ax.hi + step * 1e-9; v += step) {
    out.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  }
  return out;
}

Axis fit_axis(const PlotSpec& spec, bool x, bool log) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& s : spec.series) {
    for (double v : (x ? s.x : s.y)) {
      if (!std::isfinite(v) || (log && v <= 0)) continue;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  {
    for (const auto& [v, label] : x ? spec.v_lines : spec.h_lines) {
      if (std::isfinite(v) && (!log || v > 0)) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    }
  }
  if (!std::isfinite(lo)) {
    lo = log ? 1 : 0;
    hi = log ? 10 : 1;
  }
  Axis ax;
  ax.log = log;
  if (log) {  // the data range plus a little air; ticks fall on the decades inside it
    ax.lo = lo / 1.15;
    ax.hi = hi * 1.15;
    if (ax.hi / ax.lo < 10.0) {
      const double mid = std::sqrt(ax.lo * ax.hi);
      ax.lo = mid / std::sqrt(10.0);
      ax.hi = mid * std::sqrt(10.0);
    }
  } else {
    const double pad = hi > lo ? (hi - lo) * 0.05 : std::max(1.0, std::fabs(hi) * 0.1);
    ax.lo = (lo >= 0 && lo - pad < 0) ? 0 : lo - pad;
    ax.hi = hi + pad;
  }
  return ax;
}

// Pixels [height][width][3] as a PNG file, written atomically.
void write_rgb_png(const std::vector<unsigned char>& pixels, int width, int height,
                   const std::string& path) {
  int len = 0;
  unsigned char* png = stbi_write_png_to_mem(pixels.data(), width * 3, width, height, 3, &len);
  if (png == nullptr) throw Error(path, "PNG encoding failed");
  try {
    write_file_atomically(
        path, [&](std::ostream& out) { out.write(reinterpret_cast<const char*>(png), len); });
  } catch (...) {
    STBIW_FREE(png);
    throw;
  }
  STBIW_FREE(png);
}

}  // namespace

double PlotLayout::px(double x) const {
  return left + axis_fraction(x, x_lo, x_hi, log_x) * width;
}

double PlotLayout::py(double y) const {
  return top + height - axis_fraction(y, y_lo, y_hi, log_y) * height;
}

PlotLayout plot_layout(const PlotSpec& spec) {
  PlotLayout l;
  const int right = 24, bottom = 84 + (spec.footnote.empty() ? 0 : 18);
  l.left = 84;
  l.top = 56;
  l.width = spec.width - l.left - right;
  l.height = spec.height - l.top - bottom;
  const Axis ax = fit_axis(spec, true, spec.log_x);
  const Axis ay = fit_axis(spec, false, spec.log_y);
  l.x_lo = ax.lo;
  l.x_hi = ax.hi;
  l.y_lo = ay.lo;
  l.y_hi = ay.hi;
  l.log_x = spec.log_x;
  l.log_y = spec.log_y;
  return l;
}

std::array<unsigned char, 3> plot_series_color(std::size_t index) {
  const Rgb c = series_color(index);
  return {c.r, c.g, c.b};
}

std::vector<unsigned char> render_plot(const PlotSpec& spec) {
  Canvas c(spec.width, spec.height, kBackground);
  const PlotLayout l = plot_layout(spec);
  const int left = l.left, top = l.top, pw = l.width, ph = l.height;
  const Axis ax{l.x_lo, l.x_hi, l.log_x};
  const Axis ay{l.y_lo, l.y_hi, l.log_y};
  auto px = [&](double v) { return l.px(v); };
  auto py = [&](double v) { return l.py(v); };

  c.text(left, 18, spec.title, kInk, 3);
  // Grid, ticks and tick labels.
  for (double t : ticks(ax)) {
    const int x = static_cast<int>(std::lround(px(t)));
    c.fill_rect(x, top, x + 1, top + ph, kGrid);
    const std::string s = fmt_tick(t);
    const int tx =
        std::clamp(x - Canvas::text_width(s) / 2, 0, spec.width - Canvas::text_width(s) - 2);
    c.text(tx, top + ph + 8, s, kMuted);
  }
  for (double t : ticks(ay)) {
    const int y = static_cast<int>(std::lround(py(t)));
    c.fill_rect(left, y, left + pw, y + 1, kGrid);
    const std::string s = fmt_tick(t);
    c.text(left - 8 - Canvas::text_width(s), y - Canvas::text_height() / 2, s, kMuted);
  }
  c.fill_rect(left, top + ph, left + pw, top + ph + 2, kInk);
  c.fill_rect(left - 1, top, left + 1, top + ph + 2, kInk);
  c.text(left + pw / 2 - Canvas::text_width(spec.x_label) / 2, top + ph + 34, spec.x_label, kInk);
  c.text(10, top + ph / 2 + Canvas::text_width(spec.y_label) / 2, spec.y_label, kInk, 2, true);

  // Reference lines.
  for (const auto& [v, label] : spec.h_lines) {
    if (spec.log_y && v <= 0) continue;
    const double y = py(v);
    for (int x = left; x < left + pw; x += 10)
      c.line(x, y, std::min(x + 6, left + pw), y, kMuted, 1.2f);
    c.text(left + pw - Canvas::text_width(label) - 4, static_cast<int>(y) - 18, label, kMuted);
  }
  for (const auto& [v, label] : spec.v_lines) {
    if (spec.log_x && v <= 0) continue;
    const double x = px(v);
    for (int y = top; y < top + ph; y += 10)
      c.line(x, y, x, std::min(y + 6, top + ph), kMuted, 1.2f);
    c.text(static_cast<int>(x) + 6, top + ph - Canvas::text_height() - 6, label, kMuted);
  }
  // Series.
  for (std::size_t i = 0; i < spec.series.size(); ++i) {
    const PlotSeries& s = spec.series[i];
    const Rgb col = series_color(i);
    auto ok = [&](std::size_t k) {
      return std::isfinite(s.x[k]) && std::isfinite(s.y[k]) && (!spec.log_x || s.x[k] > 0) &&
             (!spec.log_y || s.y[k] > 0);
    };
    const std::size_t n = std::min(s.x.size(), s.y.size());
    for (std::size_t k = 0; s.line && k + 1 < n; ++k) {
      if (ok(k) && ok(k + 1))
        c.line(px(s.x[k]), py(s.y[k]), px(s.x[k + 1]), py(s.y[k + 1]), col, 2.2f);
    }
    for (std::size_t k = 0; s.markers && k < n; ++k) {
      if (ok(k)) c.dot(px(s.x[k]), py(s.y[k]), 3.5, col);
    }
  }
  // Legend (top-left inside the plot, on a translucent card).
  if (!spec.series.empty()) {
    int w = 0;
    for (const auto& s : spec.series) w = std::max(w, Canvas::text_width(s.label));
    const int lh = 20, lx = left + 12, ly = top + 10;
    c.fill_rect(lx - 6, ly - 6, lx + w + 40, ly + lh * static_cast<int>(spec.series.size()) + 2,
                kBackground, 0.85f);
    for (std::size_t i = 0; i < spec.series.size(); ++i) {
      const Rgb col = series_color(i);
      const int y = ly + lh * static_cast<int>(i);
      c.line(lx, y + 7, lx + 22, y + 7, col, 3.0f);
      c.text(lx + 30, y, spec.series[i].label, kInk);
    }
  }
  if (!spec.footnote.empty()) c.text(left, spec.height - 22, spec.footnote, kMuted);
  return c.pixels();
}

void write_png_plot(const PlotSpec& spec, const std::string& path) {
  if (spec.width < 200 || spec.height < 150 || spec.width > 8192 || spec.height > 8192) {
    fail_expected(path + ": plot size", "between 200x150 and 8192x8192",
                  std::to_string(spec.width) + "x" + std::to_string(spec.height));
  }
  write_rgb_png(render_plot(spec), spec.width, spec.height, path);
}

void write_canvas_png(const Canvas& canvas, const std::string& path) {
  write_rgb_png(canvas.pixels(), canvas.width(), canvas.height(), path);
}

}  // namespace kvscope

// PNG plots: a written file decodes to the requested size; series, reference lines and the legend
// are drawn where the layout puts them, in their colours; bad sizes are refused.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

#include "engine/common/error.h"
#include "engine/report/png_plot.h"
#include "tests/test_support.h"

#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#include <stb/stb_image.h>

namespace kvscope {
namespace {

PlotSpec sample_spec() {
  PlotSpec spec;
  spec.title = "KV bytes vs context (test)";
  spec.x_label = "context tokens";
  spec.y_label = "bytes";
  spec.log_x = spec.log_y = true;
  PlotSeries a{"fp16", {}, {}, true, true};
  PlotSeries b{"int4", {}, {}, true, false};
  for (double t = 1024; t <= 131072; t *= 2) {
    a.x.push_back(t);
    a.y.push_back(t * 327680);
    b.x.push_back(t);
    b.y.push_back(t * 81920);
  }
  spec.series = {a, b};
  spec.h_lines = {{80e9, "80 GB"}};
  spec.footnote = "kvscope test";
  return spec;
}

TEST(PngPlot, WritesADecodablePngThatIsNotBlank) {
  const std::string path = test::temp_path("plot.png");
  write_png_plot(sample_spec(), path);
  int w = 0, h = 0, n = 0;
  unsigned char* px = stbi_load(path.c_str(), &w, &h, &n, 3);
  ASSERT_NE(px, nullptr);
  EXPECT_EQ(w, 960);
  EXPECT_EQ(h, 600);
  double sum = 0, sum2 = 0;
  const int count = w * h * 3;
  for (int i = 0; i < count; ++i) {
    sum += px[i];
    sum2 += double(px[i]) * px[i];
  }
  stbi_image_free(px);
  const double mean = sum / count;
  EXPECT_GT(sum2 / count - mean * mean, 100.0);  // lines and text, not a flat image
}

using Pixels = std::vector<unsigned char>;

std::array<unsigned char, 3> pixel(const Pixels& px, const PlotSpec& spec, double x, double y) {
  const int c = static_cast<int>(std::lround(x)), r = static_cast<int>(std::lround(y));
  const std::size_t i = (static_cast<std::size_t>(r) * spec.width + c) * 3;
  return {px[i], px[i + 1], px[i + 2]};
}

// True when some pixel within `radius` of (x, y) has exactly colour `want`.
bool has_colour_near(const Pixels& px, const PlotSpec& spec, double x, double y,
                     std::array<unsigned char, 3> want, int radius = 2) {
  for (int dy = -radius; dy <= radius; ++dy)
    for (int dx = -radius; dx <= radius; ++dx)
      if (pixel(px, spec, x + dx, y + dy) == want) return true;
  return false;
}

// Two crossing lines on linear axes: y = x and y = 10 - x, with a reference line at y = 7.
PlotSpec crossing_spec() {
  PlotSpec spec;
  spec.title = "crossing";
  PlotSeries up{"up", {}, {}, true, false}, down{"down", {}, {}, true, false};
  for (int x = 0; x <= 10; ++x) {
    up.x.push_back(x);
    up.y.push_back(x);
    down.x.push_back(x);
    down.y.push_back(10 - x);
  }
  spec.series = {up, down};
  spec.h_lines = {{7.0, "budget"}};
  return spec;
}

TEST(PngPlot, SeriesAreDrawnAlongTheirDataInTheirColours) {
  const PlotSpec spec = crossing_spec();
  const Pixels px = render_plot(spec);
  const PlotLayout l = plot_layout(spec);
  const auto up = plot_series_color(0), down = plot_series_color(1);
  ASSERT_NE(up, down);
  // Along each line, away from the legend card (top-left) and the crossing.
  for (double x : {6.5, 8.0, 9.5}) {
    EXPECT_TRUE(has_colour_near(px, spec, l.px(x), l.py(x), up)) << "y = x at x = " << x;
    EXPECT_TRUE(has_colour_near(px, spec, l.px(x), l.py(10 - x), down))
        << "y = 10 - x at x = " << x;
    // Nothing of either series half-way between the two lines.
    const double mid = (x + (10 - x)) / 2;
    const auto between = pixel(px, spec, l.px(x), l.py((mid + x) / 2));
    EXPECT_NE(between, up);
    EXPECT_NE(between, down);
  }
  // The lines swap sides at x = 5: above the crossing `down` is higher on the left.
  EXPECT_LT(l.py(9.0), l.py(1.0));
}

TEST(PngPlot, AxesFitTheDataAndMapLogScales) {
  PlotSpec spec = crossing_spec();
  const PlotLayout lin = plot_layout(spec);
  EXPECT_LE(lin.x_lo, 0.0);
  EXPECT_GE(lin.x_hi, 10.0);
  EXPECT_LE(lin.y_lo, 0.0);
  EXPECT_GE(lin.y_hi, 10.0);
  EXPECT_LT(lin.px(0), lin.px(10));
  EXPECT_GT(lin.py(0), lin.py(10));  // rows grow downwards
  spec.series = {PlotSeries{"log", {10, 1000}, {1, 100}, true, false}};
  spec.h_lines.clear();
  spec.log_x = spec.log_y = true;
  const PlotLayout log = plot_layout(spec);
  // 100 is half-way between 10 and 1000 on a log axis (the margins are symmetric in log space).
  EXPECT_NEAR(log.px(100), (log.px(10) + log.px(1000)) / 2, 1.0);
  EXPECT_NEAR(log.py(10), (log.py(1) + log.py(100)) / 2, 1.0);
}

TEST(PngPlot, ReferenceLineIsDashedAtItsValue) {
  const PlotSpec spec = crossing_spec();
  const Pixels px = render_plot(spec);
  const PlotLayout l = plot_layout(spec);
  const int row = static_cast<int>(std::lround(l.py(7.0)));
  int inked = 0, gaps = 0;
  // Sample the right half of the row, clear of the legend; the series cross it at x = 3 and 7.
  for (int c = static_cast<int>(l.px(7.6)); c < static_cast<int>(l.px(9.8)); ++c) {
    const auto p = pixel(px, spec, c, row);
    if (p[0] < 200)
      ++inked;
    else
      ++gaps;
  }
  EXPECT_GT(inked, 10);
  EXPECT_GT(gaps, 5);  // dashed, not solid
  // No reference line half-way between 7 and the top of the data.
  const auto clear = pixel(px, spec, l.px(9.0), l.py(8.4));
  EXPECT_GT(clear[0], 200);
}

// A vertical line (a trained context) is dashed down its column, and it widens the x axis to
// include it when it lies past the data.
TEST(PngPlot, VerticalReferenceLineIsDashedAtItsValue) {
  PlotSpec spec = crossing_spec();
  spec.h_lines.clear();
  spec.v_lines = {{12.0, "trained context"}};
  const Pixels px = render_plot(spec);
  const PlotLayout l = plot_layout(spec);
  EXPECT_GE(l.x_hi, 12.0);
  const int col = static_cast<int>(std::lround(l.px(12.0)));
  int inked = 0, gaps = 0;
  for (int r = static_cast<int>(l.py(6.0)); r < static_cast<int>(l.py(1.0)); ++r) {
    if (pixel(px, spec, col, r)[0] < 200)
      ++inked;
    else
      ++gaps;
  }
  EXPECT_GT(inked, 10);
  EXPECT_GT(gaps, 5);  // dashed, not solid
  EXPECT_GT(pixel(px, spec, l.px(11.0), l.py(3.0))[0], 200) << "nothing drawn beside it";
}

TEST(PngPlot, LegendShowsEverySeriesColour) {
  const PlotSpec spec = crossing_spec();
  const Pixels px = render_plot(spec);
  const PlotLayout l = plot_layout(spec);
  // The legend card sits at the plot's top-left corner; each row starts with its colour swatch.
  for (std::size_t i = 0; i < spec.series.size(); ++i) {
    const double y = l.top + 10 + 20.0 * static_cast<double>(i) + 7;
    EXPECT_TRUE(has_colour_near(px, spec, l.left + 12 + 11, y, plot_series_color(i)))
        << "legend swatch " << i;
  }
}

TEST(PngPlot, RefusesAbsurdSizes) {
  PlotSpec spec = sample_spec();
  spec.width = 10;
  EXPECT_THROW(write_png_plot(spec, test::temp_path("tiny.png")), Error);
}

TEST(PngPlot, EmptyAndNonFiniteSeriesDoNotCrash) {
  PlotSpec spec;
  spec.series = {PlotSeries{"nan", {1, 2, NAN}, {NAN, INFINITY, 3}, true, true},
                 PlotSeries{"empty", {}, {}, true, true}};
  EXPECT_EQ(render_plot(spec).size(), std::size_t(960 * 600 * 3));
}

}  // namespace
}  // namespace kvscope

// PNG plots: a written file decodes to the requested size, is not blank, and bad sizes are refused.
#include <gtest/gtest.h>

#include <cmath>

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

TEST(PngPlot, RefusesAbsurdSizes) {
  PlotSpec spec = sample_spec();
  spec.width = 10;
  EXPECT_THROW(write_png_plot(spec, test::temp_path("tiny.png")), Error);
}

TEST(PngPlot, EmptyAndNonFiniteSeriesDoNotCrash) {
  PlotSpec spec;
  spec.series = {PlotSeries{"nan", {1, 2, NAN}, {NAN, INFINITY, 3}, true, true}, PlotSeries{"empty", {}, {}, true, true}};
  EXPECT_EQ(render_plot(spec).size(), std::size_t(960 * 600 * 3));
}

}  // namespace
}  // namespace kvscope

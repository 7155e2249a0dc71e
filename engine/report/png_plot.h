// PNG plots without a GUI: line and scatter plots with axes, ticks, a legend and labels, drawn in
// software with a built-in bitmap font and written with stb_image_write (atomically).
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

namespace kvscope {

struct PlotSeries {
  std::string label;
  std::vector<double> x;
  std::vector<double> y;
  bool line = true;      // connect points
  bool markers = false;  // draw a dot at each point
};

struct PlotSpec {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log_x = false;
  bool log_y = false;
  std::vector<PlotSeries> series;
  // Horizontal reference lines (a GPU's memory, a budget), each with a label.
  std::vector<std::pair<double, std::string>> h_lines;
  // Vertical reference lines (a model's trained context), each with a label.
  std::vector<std::pair<double, std::string>> v_lines;
  std::string footnote;  // e.g. "random weights" or the command that produced the plot
  int width = 960;
  int height = 600;
};

// Where render_plot puts things: the plot area in pixels and the data -> pixel mapping of both
// axes (fitted to the data plus a margin). Tests use it to check what was drawn where.
struct PlotLayout {
  int left = 0, top = 0, width = 0, height = 0;  // the plot area inside the axes
  double x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
  bool log_x = false, log_y = false;
  double px(double x) const;  // pixel column of data x
  double py(double y) const;  // pixel row of data y
};
PlotLayout plot_layout(const PlotSpec& spec);
// The colour of series `index` (RGB), as drawn in the plot and its legend.
std::array<unsigned char, 3> plot_series_color(std::size_t index);

// Renders to RGB pixels [height][width][3].
std::vector<unsigned char> render_plot(const PlotSpec& spec);
// Renders and writes a PNG; throws kvscope::Error naming the path on failure.
void write_png_plot(const PlotSpec& spec, const std::string& path);

class Canvas;
// A canvas (engine/report/raster.h) as a PNG file, written atomically.
void write_canvas_png(const Canvas& canvas, const std::string& path);

}  // namespace kvscope

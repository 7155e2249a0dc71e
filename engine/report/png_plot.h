// PNG plots without a GUI: line and scatter plots with axes, ticks, a legend and labels, drawn in
// software with a built-in bitmap font and written with stb_image_write (atomically).
#pragma once

#include <string>
#include <vector>

namespace kvscope {

struct PlotSeries {
  std::string label;
  std::vector<double> x;
  std::vector<double> y;
  bool line = true;       // connect points
  bool markers = false;   // draw a dot at each point
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
  std::string footnote;   // e.g. "random weights" or the command that produced the plot
  int width = 960;
  int height = 600;
};

// Renders to RGB pixels [height][width][3].
std::vector<unsigned char> render_plot(const PlotSpec& spec);
// Renders and writes a PNG; throws kvscope::Error naming the path on failure.
void write_png_plot(const PlotSpec& spec, const std::string& path);

}  // namespace kvscope

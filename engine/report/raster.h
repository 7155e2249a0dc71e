// A tiny RGB software canvas for report plots: rectangles, anti-aliased lines, dots, and text
// from stb_easy_font (scaled, optionally rotated 90 degrees for y-axis labels).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvscope {

struct Rgb {
  std::uint8_t r = 0, g = 0, b = 0;
};

class Canvas {
 public:
  Canvas(int width, int height, Rgb background);
  int width() const { return width_; }
  int height() const { return height_; }
  const std::vector<unsigned char>& pixels() const { return pixels_; }  // [height][width][3]

  void blend(int x, int y, Rgb c, float alpha);
  void fill_rect(int x0, int y0, int x1, int y1, Rgb c, float alpha = 1.0f);
  void line(double x0, double y0, double x1, double y1, Rgb c, float width = 1.5f);
  void dot(double x, double y, double radius, Rgb c);
  // Text with its top-left corner at (x, y); `scale` multiplies stb_easy_font's ~7 px glyphs.
  void text(int x, int y, const std::string& s, Rgb c, int scale = 2, bool vertical = false);
  static int text_width(const std::string& s, int scale = 2);
  static int text_height(int scale = 2);

 private:
  int width_, height_;
  std::vector<unsigned char> pixels_;
};

}  // namespace kvscope

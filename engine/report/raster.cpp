// Canvas implementation.
#include "engine/report/raster.h"

#include <algorithm>
#include <cmath>

#include <stb/stb_easy_font.h>

namespace kvscope {

Canvas::Canvas(int width, int height, Rgb background)
    : width_(width), height_(height), pixels_(static_cast<std::size_t>(width) * height * 3) {
  for (std::size_t i = 0; i < pixels_.size(); i += 3) {
    pixels_[i] = background.r;
    pixels_[i + 1] = background.g;
    pixels_[i + 2] = background.b;
  }
}

void Canvas::blend(int x, int y, Rgb c, float alpha) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_ || alpha <= 0.0f) return;
  alpha = std::min(alpha, 1.0f);
  unsigned char* p = &pixels_[(static_cast<std::size_t>(y) * width_ + x) * 3];
  p[0] = static_cast<unsigned char>(p[0] + (c.r - p[0]) * alpha);
  p[1] = static_cast<unsigned char>(p[1] + (c.g - p[1]) * alpha);
  p[2] = static_cast<unsigned char>(p[2] + (c.b - p[2]) * alpha);
}

void Canvas::fill_rect(int x0, int y0, int x1, int y1, Rgb c, float alpha) {
  for (int y = std::max(0, y0); y < std::min(height_, y1); ++y)
    for (int x = std::max(0, x0); x < std::min(width_, x1); ++x) blend(x, y, c, alpha);
}

void Canvas::line(double x0, double y0, double x1, double y1, Rgb c, float width) {
  // Distance-to-segment coverage over the segment's bounding box: simple and anti-aliased.
  const double half = width / 2.0;
  const int bx0 = static_cast<int>(std::floor(std::min(x0, x1) - half - 1));
  const int bx1 = static_cast<int>(std::ceil(std::max(x0, x1) + half + 1));
  const int by0 = static_cast<int>(std::floor(std::min(y0, y1) - half - 1));
  const int by1 = static_cast<int>(std::ceil(std::max(y0, y1) + half + 1));
  const double dx = x1 - x0, dy = y1 - y0, len2 = dx * dx + dy * dy;
  for (int y = std::max(0, by0); y <= std::min(height_ - 1, by1); ++y) {
    for (int x = std::max(0, bx0); x <= std::min(width_ - 1, bx1); ++x) {
      double t = len2 > 0 ? ((x - x0) * dx + (y - y0) * dy) / len2 : 0.0;
      t = std::clamp(t, 0.0, 1.0);
      const double px = x0 + t * dx - x, py = y0 + t * dy - y;
      const double d = std::sqrt(px * px + py * py);
      blend(x, y, c, static_cast<float>(std::clamp(half + 0.5 - d, 0.0, 1.0)));
    }
  }
}

void Canvas::dot(double cx, double cy, double radius, Rgb c) {
  for (int y = static_cast<int>(cy - radius - 1); y <= static_cast<int>(cy + radius + 1); ++y) {
    for (int x = static_cast<int>(cx - radius - 1); x <= static_cast<int>(cx + radius + 1); ++x) {
      const double d = std::hypot(x - cx, y - cy);
      blend(x, y, c, static_cast<float>(std::clamp(radius + 0.5 - d, 0.0, 1.0)));
    }
  }
}

int Canvas::text_width(const std::string& s, int scale) {
  return stb_easy_font_width(const_cast<char*>(s.c_str())) * scale;
}

int Canvas::text_height(int scale) {
  return 7 * scale;
}

void Canvas::text(int x, int y, const std::string& s, Rgb c, int scale, bool vertical) {
  // stb_easy_font emits axis-aligned quads (4 vertices of x, y, z, color) in glyph units.
  static thread_local std::vector<char> buffer(1 << 16);
  const std::size_t need = s.size() * 270 + 64;
  if (buffer.size() < need) buffer.resize(need);
  const int quads = stb_easy_font_print(0, 0, const_cast<char*>(s.c_str()), nullptr, buffer.data(),
                                        static_cast<int>(buffer.size()));
  const float* v = reinterpret_cast<const float*>(buffer.data());
  for (int q = 0; q < quads; ++q) {
    const float* quad = v + q * 16;  // 4 vertices x 4 floats
    const int qx0 = static_cast<int>(quad[0]) * scale, qy0 = static_cast<int>(quad[1]) * scale;
    const int qx1 = static_cast<int>(quad[8]) * scale, qy1 = static_cast<int>(quad[9]) * scale;
    if (!vertical) {
      fill_rect(x + qx0, y + qy0, x + qx1, y + qy1, c);
    } else {  // rotated 90 degrees counter-clockwise: text reads bottom to top, starting at (x, y)
      fill_rect(x + qy0, y - qx1, x + qy1, y - qx0, c);
    }
  }
}

}  // namespace kvscope

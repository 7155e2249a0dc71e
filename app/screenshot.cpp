// glReadPixels + stb_image_write, flipped to top-down rows.
#include "app/screenshot.h"

#if defined(__EMSCRIPTEN__)
#include <GLES3/gl3.h>
#else
#include <GL/gl.h>
#endif
#include <stb_image_write.h>

#include <cstring>
#include <vector>

#include "engine/common/atomic_write.h"
#include "engine/common/error.h"

namespace kvscope::ui {

void save_framebuffer_png(const std::string& path, int width, int height) {
  if (width <= 0 || height <= 0) throw Error(path, "the window has no pixels to save");
  // RGBA is the one format every OpenGL and WebGL 2 context reads back; the PNG keeps RGB.
  const std::size_t count = static_cast<std::size_t>(width) * height;
  std::vector<unsigned char> rgba(count * 4);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadBuffer(GL_BACK);
  glReadPixels(0, 0, width, height, GL_RGBA, GL_UNSIGNED_BYTE, rgba.data());
  std::vector<unsigned char> pixels(count * 3);  // [h][w][rgb]
  for (std::size_t i = 0; i < count; ++i) std::memcpy(&pixels[i * 3], &rgba[i * 4], 3);
  const std::size_t row = static_cast<std::size_t>(width) * 3;
  std::vector<unsigned char> line(row);
  for (int y = 0; y < height / 2; ++y) {  // OpenGL rows are bottom-up
    unsigned char* a = pixels.data() + row * y;
    unsigned char* b = pixels.data() + row * (height - 1 - y);
    std::memcpy(line.data(), a, row);
    std::memcpy(a, b, row);
    std::memcpy(b, line.data(), row);
  }
  std::vector<unsigned char> png;
  const auto append = [](void* context, void* data, int size) {
    auto* out = static_cast<std::vector<unsigned char>*>(context);
    const auto* bytes = static_cast<const unsigned char*>(data);
    out->insert(out->end(), bytes, bytes + size);
  };
  if (stbi_write_png_to_func(append, &png, width, height, 3, pixels.data(),
                             static_cast<int>(row)) == 0) {
    throw Error(path, "PNG encoding failed");
  }
  write_file_atomically(path, [&](std::ostream& out) {
    out.write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
  });
}

}  // namespace kvscope::ui

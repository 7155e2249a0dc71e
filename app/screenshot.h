// Screenshot export: reads the current OpenGL framebuffer and writes it as a PNG (atomically).
#pragma once

#include <string>

namespace kvscope::ui {

// Reads width x height pixels of the back buffer and writes them to `path`; throws kvscope::Error.
void save_framebuffer_png(const std::string& path, int width, int height);

}  // namespace kvscope::ui

// --backend auto|cpu|cuda|cuda-sim and --device-weights: the help lines (the choice itself is
// kernels/backend/backend_select.h, shared with the UI).
#pragma once

#include <memory>
#include <string>

#include "kernels/backend/backend_select.h"
#include "kernels/backend/cuda_backend.h"

namespace kvscope::cli {

// A command's --help text with its line "%BACKEND%" replaced by the --backend and
// --device-weights lines.
std::string with_backend_help(const char* help);

}  // namespace kvscope::cli

// --backend auto|cpu|cuda|cuda-sim: which Backend runs the forward pass.
#pragma once

#include <memory>
#include <string>

#include "engine/backend/backend.h"

namespace kvscope::cli {

// "auto" and "cpu": the CPU backend with `threads` threads; "cuda-sim": the CUDA kernels on the
// SIMT emulator (kernels/backend/cuda_sim_backend.h); "cuda" is a one-line error while no CUDA
// backend is built. Throws kvscope::Error naming --backend for anything else.
std::unique_ptr<Backend> make_backend(const std::string& value, int threads);

}  // namespace kvscope::cli

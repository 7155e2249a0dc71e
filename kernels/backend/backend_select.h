// Which Backend runs the forward pass: the CPU, the CUDA backend on a GPU, or the CUDA backend on
// the emulated device. Shared by the CLI's --backend flag and the UI's backend choice.
#pragma once

#include <memory>
#include <string>

#include "engine/backend/backend.h"

namespace kvscope {

class Model;

// What a run asks of the forward pass, for --backend auto to decide whether the CUDA backend
// covers it: every K/V format and MLA latents are covered; quantized (native) weights are not.
struct RunNeeds {
  const Model* model = nullptr;
};

// What of `needs` the CUDA backend does not cover yet ("" when it covers all of it).
std::string cuda_gap(const RunNeeds& needs);

// "cpu": the CPU backend with `threads` threads. "cuda-sim": the CUDA backend on the emulated
// device. "cuda": the CUDA backend on the first GPU; without one, a one-line kvscope::Error with
// the runtime's reason (exit 2). "auto": the GPU when there is one and it covers `needs`, else
// the CPU: silently without a GPU, saying once on stderr why a GPU there is not used
// ("CUDA: the backend does not cover <what> yet; using CPU"). `device_weights`
// is --device-weights (f32, f16 or bf16: the GEMMs' weight type on the device). Throws
// kvscope::Error naming the flag for anything else.
// `cpu_hint` ends the "does not cover" error (the UI names its own control).
std::unique_ptr<Backend> make_backend(const std::string& value, int threads,
                                      const std::string& device_weights, const RunNeeds& needs,
                                      const std::string& cpu_hint = "--backend cpu runs it");

}  // namespace kvscope

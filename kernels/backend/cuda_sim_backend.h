// The Backend whose ops are the CUDA kernels of kernels/ops, executed by the SIMT emulator on the
// CPU (`kvscope generate --backend cuda-sim`): the forward pass runs the very kernel code the GPU
// build compiles, slowly, to verify it end to end and to show what each kernel does. Host memory
// stands in for device memory. What the kernels do not cover yet is refused with a one-line
// kvscope::Error: quantized weights (--weight-format f32 is needed), KV formats other than fp32,
// MLA latents, token eviction, attention capture, contexts beyond 12,288 slots.
#pragma once

#include <memory>

#include "engine/backend/backend.h"

namespace kvscope {

std::unique_ptr<Backend> make_cuda_sim_backend();

}  // namespace kvscope

// Which device the CUDA backend's tests run on: the emulated device (the default, every machine of
// this project) or, with KVSCOPE_TEST_DEVICE=cuda, the GPU (scripts/gpu-check.sh on a lent
// device machine). A test asks for its backend or DeviceOps here and never names the device, so
// the same assertions hold on both.
#pragma once

#include <memory>
#include <string>

#include "engine/backend/backend.h"
#include "kernels/backend/cuda_backend.h"
#include "kernels/backend/device_ops.h"

namespace kvscope::test {

// True when KVSCOPE_TEST_DEVICE=cuda. Any other value but "" or "cuda-sim" fails the test binary
// at its first use (a typo must not quietly test the emulator instead).
bool on_gpu();
// "cuda" or "cuda-sim": the backend's and DeviceOps' name() on that device.
const char* device_name();
// The CUDA backend on that device with GEMM weights in `weights`; on the GPU, a missing or
// unusable device throws (the test fails, it never falls back to the emulator).
std::unique_ptr<Backend> device_backend(GemmType weights = GemmType::kF16);
// DeviceOps on that device, likewise.
std::unique_ptr<device::DeviceOps> device_ops();

}  // namespace kvscope::test

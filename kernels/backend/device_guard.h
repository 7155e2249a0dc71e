// guarded(): the CUDA backend's one translation of a device failure (device::DeviceError, the
// runtime's or cuBLAS's own words) into the one-line kvscope::Error naming the --backend flag.
#pragma once

#include <string>

#include "engine/common/error.h"
#include "kernels/backend/device_ops.h"

namespace kvscope {

// Runs `body`, turning a device failure into the flag's one-line error.
template <class F>
void guarded(const std::string& flag, F&& body) {
  try {
    body();
  } catch (const device::DeviceError& e) {
    throw Error(flag, e.what());
  }
}

}  // namespace kvscope

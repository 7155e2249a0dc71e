// DeviceWeightCache: the CUDA backend's device copies of the model's host weights, keyed by the
// host pointer: fp32 rows uploaded on first use and, for the 16-bit GEMM types, converted on the
// device once (kernels' to_16bit), then reused by every later step.
//
// Invariants: an entry holds exactly `count` values of `type` for its host pointer. Weights belong
// to the model and outlive the backend's use of them; a pointer seen again with another count or
// type (another model at a reused address) is uploaded again and replaces its entry. Entries are
// freed with the cache (the backend), never earlier.
#pragma once

#include <cstddef>
#include <unordered_map>

#include "kernels/backend/device_buffer.h"
#include "kernels/backend/device_ops.h"

namespace kvscope {

class DeviceWeightCache {
 public:
  explicit DeviceWeightCache(device::DeviceOps& ops) : ops_(ops) {}

  // The device copy of host weights w[count] in `type` (device memory, valid while the entry
  // is), uploaded and converted on first use.
  const void* get(const float* w, std::size_t count, device::GemmType type);

 private:
  struct Entry {
    DeviceBuffer buffer;  // [count] values of `type`
    std::size_t count = 0;
    device::GemmType type = device::GemmType::kF32;
  };
  device::DeviceOps& ops_;
  std::unordered_map<const float*, Entry> entries_;
};

}  // namespace kvscope

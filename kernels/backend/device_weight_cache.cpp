// See device_weight_cache.h.
#include "kernels/backend/device_weight_cache.h"

#include <cstdint>
#include <utility>

namespace kvscope {

const void* DeviceWeightCache::get(const float* w, std::size_t count, device::GemmType type) {
  auto it = entries_.find(w);
  if (it != entries_.end() && it->second.count == count && it->second.type == type)
    return it->second.buffer.as<void>();
  DeviceBuffer f32(ops_, count * 4);
  ops_.to_device(f32.as<void>(), w, count * 4);
  if (type != device::GemmType::kF32) {
    DeviceBuffer h(ops_, count * 2);
    ops_.to_16bit(h.as<std::uint16_t>(), f32.as<float>(), static_cast<long>(count),
                  type == device::GemmType::kBF16);
    f32 = std::move(h);
  }
  Entry& slot = entries_[w];
  slot = {std::move(f32), count, type};
  return slot.buffer.as<void>();
}

}  // namespace kvscope

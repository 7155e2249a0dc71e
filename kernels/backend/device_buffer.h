// DeviceBuffer: one device allocation through DeviceOps, freed with its owner (move-only). The
// CUDA backend's pools, weights and scratch buffers are these; CachedUpload keeps host data that
// rarely changes (a step's block tables) in one, uploading it again only when it changed.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "kernels/backend/device_ops.h"

namespace kvscope {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(device::DeviceOps& ops, std::size_t bytes)
      : ops_(&ops), p_(bytes > 0 ? ops.alloc(bytes) : nullptr), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ops_(o.ops_), p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ops_ = o.ops_;
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }

  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  void reset() {
    if (p_ != nullptr) ops_->release(p_);
    p_ = nullptr;
    bytes_ = 0;
  }
  device::DeviceOps* ops_ = nullptr;
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

// b, grown (never shrunk) to hold at least `bytes`: a scratch buffer reused op after op.
inline DeviceBuffer& grown(device::DeviceOps& ops, DeviceBuffer& b, std::size_t bytes) {
  if (b.bytes() < bytes) b = DeviceBuffer(ops, bytes > 2 * b.bytes() ? bytes : 2 * b.bytes());
  return b;
}

// Host data kept on the device in a buffer of its own, copied again only when it changed.
template <class T>
class CachedUpload {
 public:
  // The device copy of `host` (device memory, valid until the next stage()): uploaded when it
  // differs from what the buffer holds (equal data is already there: same size, same values).
  const T* stage(device::DeviceOps& ops, const std::vector<T>& host) {
    if (host != held_) {
      const std::size_t bytes = host.size() * sizeof(T);
      ops.to_device(grown(ops, buffer_, bytes).template as<T>(), host.data(), bytes);
      held_ = host;
    }
    return buffer_.as<T>();
  }

 private:
  DeviceBuffer buffer_;
  std::vector<T> held_;  // what buffer_ holds
};

}  // namespace kvscope

// DeviceBuffer: one device allocation through DeviceOps, freed with its owner (move-only). The
// CUDA backend's pools, weights and scratch buffers are these.
#pragma once

#include <cstddef>
#include <utility>

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

}  // namespace kvscope

// make_cuda_device_ops() in a build without nvcc (or with KVSCOPE_CUDA=OFF): there is no real
// device path to offer, and the caller says so (--backend cuda: an error; auto: the CPU).
#include "kernels/backend/device_ops.h"

namespace kvscope::device {

std::unique_ptr<DeviceOps> make_cuda_device_ops(std::string* why) {
  *why =
      "this kvscope was built without nvcc (or with KVSCOPE_CUDA=OFF), so it has no CUDA backend";
  return nullptr;
}

std::string cuda_device_name() {
  return "";
}

}  // namespace kvscope::device

// See device_under_test.h.
#include "tests/kernels/device_under_test.h"

#include <cstdlib>
#include <stdexcept>

namespace kvscope::test {

bool on_gpu() {
  static const bool gpu = [] {
    const char* v = std::getenv("KVSCOPE_TEST_DEVICE");
    const std::string value = v == nullptr ? "" : v;
    if (value == "cuda") return true;
    if (value.empty() || value == "cuda-sim") return false;
    throw std::invalid_argument("KVSCOPE_TEST_DEVICE: expected cuda or cuda-sim, got \"" + value +
                                "\"");
  }();
  return gpu;
}

const char* device_name() {
  return on_gpu() ? "cuda" : "cuda-sim";
}

std::unique_ptr<Backend> device_backend(GemmType weights) {
  if (!on_gpu()) return make_cuda_sim_backend(weights);
  std::string why;
  auto backend = make_cuda_backend(weights, &why);
  if (backend == nullptr)
    throw std::runtime_error("KVSCOPE_TEST_DEVICE=cuda: CUDA unavailable: " + why);
  return backend;
}

std::unique_ptr<device::DeviceOps> device_ops() {
  if (!on_gpu()) return device::make_emulated_device_ops();
  std::string why;
  auto ops = device::make_cuda_device_ops(&why);
  if (ops == nullptr)
    throw std::runtime_error("KVSCOPE_TEST_DEVICE=cuda: CUDA unavailable: " + why);
  return ops;
}

}  // namespace kvscope::test

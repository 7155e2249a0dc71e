// DeviceOps on the emulated device: device_ops_body.inc compiled by g++ against the CUDA runtime
// and cuBLAS stand-ins (kernels/sim/cuda_api_sim.h), the kernels run by the SIMT emulator.
#include <functional>
#include <string>

#include "kernels/backend/device_ops.h"
#include "kernels/ops/argmax.cuh"
#include "kernels/ops/convert.cuh"
#include "kernels/ops/decode_attention.cuh"
#include "kernels/ops/kv_fill.cuh"
#include "kernels/ops/kv_kivi.cuh"
#include "kernels/ops/kv_rotate.cuh"
#include "kernels/ops/kv_write.cuh"
#include "kernels/ops/mla.cuh"
#include "kernels/ops/paged_attention.cuh"
#include "kernels/ops/rmsnorm.cuh"
#include "kernels/ops/rope.cuh"
#include "kernels/ops/swiglu.cuh"
#include "kernels/sim/cuda_api_sim.h"

namespace kvscope::device {
namespace {

namespace rt = ::kvscope::cuda_sim;

#include "kernels/backend/device_ops_body.inc"

}  // namespace

std::unique_ptr<DeviceOps> make_emulated_device_ops() {
  return std::make_unique<DeviceOpsImpl>("cuda-sim");
}

}  // namespace kvscope::device

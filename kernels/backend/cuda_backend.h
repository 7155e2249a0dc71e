// The engine's Backend on a CUDA device: `--backend cuda` (a GPU, through the CUDA runtime and
// cuBLAS) and `--backend cuda-sim` (the same code on the emulated device: the runtime and cuBLAS
// stand-ins of kernels/sim/cuda_api_sim.h and the SIMT emulator). Both are one class over
// DeviceOps (device_ops.h), whose body is compiled once by nvcc and once by g++: CudaBackend,
// declared in cuda_backend_impl.h (internal to kvscope_cuda; it says how its code is split).
//
// The backend owns its device memory: the weights, converted to the GEMM type and uploaded once
// (on first use); a device copy of each KV pool it writes (the host pool's bytes are not used);
// activation buffers. It runs each engine step whole (Backend::run_step): the step's token
// embeddings go up, the wanted tokens' logits come back, and the activations in between stay on
// the device. Its op-level methods (matmul_batch, rmsnorm, ...) take host pointers, copying
// inputs up and outputs back per call: the tests hold the whole step to them.
//
// K/V formats: fp32, fp16, bf16, int8, fp8, int4, int2 and KIVI, quantized on write and
// dequantized in attention by the kernels (KIVI's open group stays in full precision on the
// device until it fills, then kernels/ops/kv_kivi.cuh quantizes it); attention capture (heatmaps,
// sink shares) reads the kernel's softmax rows back. MLA latent caches (modes A and B) run on the
// device too (cuda_mla.h). What the kernels do not cover yet is refused with a one-line
// kvscope::Error naming the flag: quantized weights (--weight-format f32 dequantizes them).
// Long contexts run split-K attention (kernels/ops/paged_attention.cuh).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "engine/backend/backend.h"
#include "engine/kv/kv_format.h"
#include "kernels/backend/device_ops.h"

namespace kvscope {

using device::GemmType;

// "f32", "f16" or "bf16"; `flag` names the option in the error for anything else.
GemmType parse_gemm_type(const std::string& value, const std::string& flag);
const char* gemm_type_name(GemmType type);

// The kernels' code for K/V format f's K (kind kKey) or V tiles: every format has one (KIVI's
// values are int4 / int2 tiles).
device::KvCode cuda_kv_code(const KvFormat& f, KvKind kind);

// What a CUDA backend (cuda or cuda-sim) has copied between host and device so far; nullopt for
// any other backend.
std::optional<device::Traffic> cuda_traffic(const Backend& backend);

// --backend cuda-sim: the emulated device; weights in `weights` on it.
std::unique_ptr<Backend> make_cuda_sim_backend(GemmType weights = GemmType::kF16);

// --backend cuda: the first CUDA device, or nullptr with *why (the runtime's reason, or that the
// build has none) when there is no usable one.
std::unique_ptr<Backend> make_cuda_backend(GemmType weights, std::string* why);

}  // namespace kvscope

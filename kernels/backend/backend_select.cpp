// See backend_select.h.
#include "kernels/backend/backend_select.h"

#include <cstdio>

#include "engine/common/error.h"
#include "engine/model/checkpoint.h"
#include "kernels/backend/cuda_backend.h"

namespace kvscope {

std::string cuda_gap(const RunNeeds& needs) {
  if (needs.model != nullptr && needs.model->native() != nullptr)
    return "quantized weights (--weight-format f32 dequantizes them)";
  return "";
}

std::unique_ptr<Backend> make_backend(const std::string& value, int threads,
                                      const std::string& device_weights, const RunNeeds& needs,
                                      const std::string& cpu_hint) {
  const GemmType weights = parse_gemm_type(device_weights, "--device-weights");
  if (value == "cpu") return make_cpu_backend(threads);
  const std::string gap = cuda_gap(needs);
  if ((value == "cuda" || value == "cuda-sim") && !gap.empty()) {
    throw Error("--backend",
                value + ": the CUDA backend does not cover " + gap + " yet (" + cpu_hint + ")");
  }
  if (value == "cuda-sim") return make_cuda_sim_backend(weights);
  if (value == "cuda" || value == "auto") {
    std::string why;
    auto cuda = make_cuda_backend(weights, &why);
    if (value == "cuda") {
      if (cuda == nullptr) throw Error("--backend", "cuda: CUDA unavailable: " + why);
      return cuda;
    }
    if (cuda != nullptr && gap.empty()) return cuda;
    // No GPU is the usual case on a laptop: said nothing about (a newcomer reads a notice as a
    // broken install); `--backend cuda` gives the runtime's reason. A GPU left unused is said.
    static bool said = false;
    if (!said && cuda != nullptr) {
      said = true;
      std::fprintf(stderr, "CUDA: the backend does not cover %s yet; using CPU\n", gap.c_str());
    }
    return make_cpu_backend(threads);
  }
  throw Error("--backend", "expected auto, cpu, cuda or cuda-sim, got \"" + value + "\"");
}

}  // namespace kvscope

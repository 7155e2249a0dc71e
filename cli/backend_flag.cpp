// See backend_flag.h.
#include "cli/backend_flag.h"

#include "engine/common/error.h"
#include "kernels/backend/cuda_sim_backend.h"

namespace kvscope::cli {

std::unique_ptr<Backend> make_backend(const std::string& value, int threads) {
  if (value == "auto" || value == "cpu") return make_cpu_backend(threads);
  if (value == "cuda-sim") return make_cuda_sim_backend();
  if (value == "cuda") {
    throw Error("--backend",
                "cuda: this build has no CUDA backend yet (its kernels exist and run on the "
                "emulator: --backend cuda-sim; docs/kernels.md)");
  }
  throw Error("--backend", "expected auto, cpu, cuda or cuda-sim, got \"" + value + "\"");
}

}  // namespace kvscope::cli

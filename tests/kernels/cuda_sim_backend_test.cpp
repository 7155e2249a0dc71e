// The forward pass on the CUDA kernels, executed by the SIMT emulator (--backend cuda-sim): the
// greedy tokens and the logits match the CPU backend's on stories260K, and what the kernels do
// not cover yet is refused with a one-line error rather than computed wrongly.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/common/error.h"
#include "engine/infer/generate.h"
#include "engine/infer/transformer.h"
#include "kernels/backend/cuda_sim_backend.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

TEST(CudaSimBackend, GreedyTokensAndLogitsMatchTheCpuOnTheRealModel) {
  const auto& m = test::real_model();
  auto cpu = make_cpu_backend(1);
  auto sim = make_cuda_sim_backend();
  EXPECT_EQ(sim->name(), "cuda-sim");
  Transformer on_cpu(m.model, *cpu), on_sim(m.model, *sim);
  GenerateOptions o;  // greedy, fp32 K/V
  std::vector<std::vector<float>> cpu_logits, sim_logits;
  const int steps = 16;  // slow under AddressSanitizer (a fiber switch per warp collective)
  const std::vector<int> want = generate_tokens(on_cpu, {}, steps, o, &cpu_logits);
  const std::vector<int> got = generate_tokens(on_sim, {}, steps, o, &sim_logits);
  EXPECT_EQ(got, want);
  ASSERT_EQ(sim_logits.size(), cpu_logits.size());
  double worst = 0.0;
  for (std::size_t s = 0; s < cpu_logits.size(); ++s) {
    for (std::size_t v = 0; v < cpu_logits[s].size(); ++v)
      worst = std::max(worst, double(std::fabs(sim_logits[s][v] - cpu_logits[s][v])));
  }
  EXPECT_LT(worst, 1e-3) << "logits differ by more than float rounding in other sum orders";
  std::printf("[cuda-sim] %d greedy tokens equal the CPU's; max |logit diff| %.2e\n", steps - 1,
              worst);
}

TEST(CudaSimBackend, RefusesWhatItsKernelsDoNotCoverYet) {
  const auto& m = test::real_model();
  auto sim = make_cuda_sim_backend();
  Transformer t(m.model, *sim);
  GenerateOptions o;
  o.k_format = o.v_format = parse_kv_format("int8", "test");
  try {
    generate_tokens(t, {}, 4, o, nullptr);
    ADD_FAILURE() << "int8 K/V ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected fp32 K/V (--kv-dtype fp32), got int8/int8"),
              std::string::npos)
        << e.what();
  }
  const auto& smol = test::smollm2_native();
  Transformer native(smol.model, *sim);
  try {
    generate_tokens(native, {}, 2, GenerateOptions{}, nullptr);
    ADD_FAILURE() << "quantized weights ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected fp32 weights (--weight-format f32)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kvscope

// scenarios/smollm2-chat.json, the default demo (scripts/run.sh opens it): run on the real model,
// every answer is right, on the GGUF's native 4-bit weights and on f32 weights. A 135M model gets
// many plain questions wrong (with the scenario's earlier system turn it named "L'Étoile" the
// capital of France); these six it answers, and a presenter must not be embarrassed by the
// first run a newcomer sees.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "engine/scenario/scenario.h"
#include "engine/sched/simulator.h"

namespace kvscope {
namespace {

void expect_right_answers(WeightFormat format) {
  const Scenario s = parse_scenario(
      (std::filesystem::path(KVSCOPE_SOURCE_DIR) / "scenarios" / "smollm2-chat.json").string());
  const ScenarioModelLoad model = load_scenario_model(s, "", false, format);
  ResolvedRun run = resolve_scenario(s, "", model.shape, model.tokenizer.get());
  ASSERT_EQ(run.requests.size(), 6u);
  Simulator sim(run.config, SimModel{model.shape, model.weights}, std::move(run.requests));
  sim.run(1000);
  ASSERT_TRUE(sim.done());
  // What each answer must say (in the order of the scenario's questions): words every right
  // answer has, as the wording may change with the build's float rounding (the sanitizer build
  // answers "scattering sunlight" where the release build says "Rayleigh scattering").
  const std::vector<std::string> must = {"Paris", "scattering", "H2O", "cold", "8 legs", "100"};
  for (int i = 0; i < 6; ++i) {
    const std::string answer = model.tokenizer->decode_all(sim.request(i).generated_tokens());
    EXPECT_NE(answer.find(must[static_cast<std::size_t>(i)]), std::string::npos)
        << "question " << i << " answered: " << answer;
  }
  // The system turn is shared: every request after the first maps its 3 full blocks.
  for (int i = 1; i < 6; ++i) EXPECT_GE(sim.request(i).prefix_hit_tokens, 48) << i;
}

TEST(SmolLM2Chat, TheDefaultDemoAnswersRightOnNativeWeights) {
  expect_right_answers(WeightFormat::kNative);
}

TEST(SmolLM2Chat, TheDefaultDemoAnswersRightOnF32Weights) {
  expect_right_answers(WeightFormat::kF32);
}

}  // namespace
}  // namespace kvscope

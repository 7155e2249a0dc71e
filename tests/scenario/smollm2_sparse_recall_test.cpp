// scenarios/smollm2-sparse-recall.json: the answer needs a fact from the start of a 162-token
// prompt. With 48 keys per query, selection (the whole cache kept, each query picking its keys)
// still finds it; eviction at the same 48 tokens has dropped it; dense attention finds it. The
// answers depend on the last bits of the build's float rounding, like the chat demo's
// (tests/release_only.txt).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "engine/scenario/scenario.h"
#include "engine/sched/simulator.h"

namespace kvscope {
namespace {

std::string answer_of(const std::string& variant) {
  const Scenario s = parse_scenario(
      (std::filesystem::path(KVSCOPE_SOURCE_DIR) / "scenarios" / "smollm2-sparse-recall.json")
          .string());
  const ScenarioModelLoad model = load_scenario_model(s, "", false, WeightFormat::kNative);
  ResolvedRun run = resolve_scenario(s, variant, model.shape, model.tokenizer.get());
  Simulator sim(run.config, SimModel{model.shape, model.weights}, std::move(run.requests));
  sim.run(1000);
  EXPECT_TRUE(sim.done());
  return model.tokenizer->decode_all(sim.request(0).generated_tokens());
}

// What the captions say each run answers: the oracle's 48 keys and dense attention name the city;
// eviction at 48 tokens, SparQ's and Quest's 48 picks do not (eviction names no city, SparQ a
// made-up one).
TEST(SmolLM2SparseRecall, SelectionFindsTheFactThatEvictionLost) {
  const std::string oracle = answer_of("");
  EXPECT_NE(oracle.find("The city I live in is Dublin, Ireland."), std::string::npos) << oracle;
  const std::string dense = answer_of("dense");
  EXPECT_NE(dense.find("In the city of Dublin,"), std::string::npos) << dense;
  const std::string evicted = answer_of("evict");
  EXPECT_EQ(evicted.find("Dublin"), std::string::npos) << "eviction answered: " << evicted;
  EXPECT_NE(evicted.find("the one with the most unique and diverse population"), std::string::npos)
      << "eviction answered: " << evicted;
  const std::string sparq = answer_of("sparq");
  EXPECT_EQ(sparq.find("Dublin"), std::string::npos) << "sparq answered: " << sparq;
  EXPECT_NE(sparq.find("Elmira"), std::string::npos) << "sparq answered: " << sparq;
  const std::string quest = answer_of("quest");
  EXPECT_EQ(quest.find("Dublin"), std::string::npos) << "quest answered: " << quest;
}

}  // namespace
}  // namespace kvscope

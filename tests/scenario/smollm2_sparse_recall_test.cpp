// scenarios/smollm2-sparse-recall.json: the answer needs a fact from the start of a 157-token
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
// eviction at 48 tokens, SparQ's and Quest's 48 picks do not (eviction says it is not mentioned).
TEST(SmolLM2SparseRecall, SelectionFindsTheFactThatEvictionLost) {
  for (const char* v : {"", "dense"}) {
    const std::string a = answer_of(v);
    EXPECT_NE(a.find("In Lisbon"), std::string::npos) << "variant '" << v << "' answered: " << a;
  }
  const std::string evicted = answer_of("evict");
  EXPECT_EQ(evicted.find("Lisbon"), std::string::npos) << "eviction answered: " << evicted;
  EXPECT_NE(evicted.find("not mentioned"), std::string::npos) << "eviction answered: " << evicted;
  for (const char* v : {"sparq", "quest"}) {
    const std::string a = answer_of(v);
    EXPECT_EQ(a.find("Lisbon"), std::string::npos) << "variant '" << v << "' answered: " << a;
  }
}

}  // namespace
}  // namespace kvscope

// Every shipped scenario parses and validates against the JSON Schema's key lists, and every
// variant of every one runs headless on the real model (a shortened step count) with the pool's
// invariants intact.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "engine/scenario/scenario.h"
#include "engine/sched/simulator.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(KVSCOPE_SOURCE_DIR) / "scenarios";
// CI runs every variant for at most this many steps (under AddressSanitizer, where the real
// model runs several times slower, 20: prefill, the first decode steps and their bookkeeping).
#if defined(__SANITIZE_ADDRESS__)
constexpr int kCiSteps = 20;
#else
constexpr int kCiSteps = 60;
#endif

std::vector<std::string> shipped_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kDir)) {
    const fs::path p = e.path();
    if (p.extension() == ".json" && p.filename() != "scenario.schema.json") {
      names.push_back(p.stem().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

class ShippedScenario : public ::testing::TestWithParam<std::string> {};

TEST_P(ShippedScenario, ParsesAndEveryRunnableVariantRuns) {
  const std::string path = (kDir / (GetParam() + ".json")).string();
  const Scenario s = parse_scenario(path);
  EXPECT_FALSE(s.title.empty());
  EXPECT_FALSE(s.description.empty());
  EXPECT_GE(s.captions.size(), 3u) << "each shipped scenario has presenter captions";
  for (const std::string& variant : s.variant_names()) {
    SCOPED_TRACE(GetParam() + "/" + variant);
    const ScenarioModelLoad model = load_scenario_model(s, "", false);
    ResolvedRun run = resolve_scenario(s, variant, model.shape, model.tokenizer.get());
    attach_mla(run, model.weights, s.path);
    EXPECT_FALSE(run.requests.empty());
    Simulator sim(run.config, SimModel{model.shape, model.weights}, std::move(run.requests));
    const int steps = std::min(kCiSteps, s.steps.value_or(kCiSteps));
    sim.run(steps);
    EXPECT_GE(sim.current_step(), 1);
    EXPECT_NO_THROW(sim.check_invariants());
  }
}

INSTANTIATE_TEST_SUITE_P(Scenarios, ShippedScenario, ::testing::ValuesIn(shipped_names()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string n = param.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// docs/tour.md runs these stories260K scenarios on SmolLM2 (`--model smollm2`): their pools are
// sized in blocks or pool_tokens, so on SmolLM2's shape and tokenizer every variant still admits
// and finishes every request (block accounting only: a bookkeeping run decodes max_new_tokens).
TEST(ShippedScenarios, TheTourRunsItsStoriesStopsOnSmolLM2) {
  // SmolLM2's shape and tokenizer, loaded once (the override replaces every scenario's model).
  const ScenarioModelLoad model =
      load_scenario_model(parse_scenario((kDir / "minimal.json").string()), "smollm2", true);
  ASSERT_EQ(model.shape.n_kv_heads, 3) << "SmolLM2-135M's shape";
  for (const char* name :
       {"naive-vs-paged", "block-size", "shared-system-prompt", "multi-turn-chat",
        "parallel-sampling", "memory-pressure", "quantization-ladder"}) {
    const Scenario s = parse_scenario((kDir / (std::string(name) + ".json")).string());
    for (const std::string& variant : s.variant_names()) {
      SCOPED_TRACE(std::string(name) + "/" + variant);
      ResolvedRun run = resolve_scenario(s, variant, model.shape, model.tokenizer.get());
      Simulator sim(run.config, SimModel{model.shape, nullptr}, std::move(run.requests));
      sim.run(s.steps.value_or(100000));
      for (int id = 0; id < sim.num_requests(); ++id) {
        EXPECT_TRUE(sim.request(id).finished_step.has_value())
            << "request " << id << ": " << sim.request(id).reject_reason;
      }
      EXPECT_NO_THROW(sim.check_invariants());
    }
  }
}

TEST(ShippedScenarios, TheIssuesDozenIsThere) {
  // The twelve teaching scenarios of the scenario issue, plus minimal and mixed-lengths.
  const std::vector<std::string> shipped = shipped_names();
  const std::set<std::string> names(shipped.begin(), shipped.end());
  for (const char* name :
       {"naive-vs-paged", "block-size", "shared-system-prompt", "multi-turn-chat",
        "parallel-sampling", "memory-pressure", "quantization-ladder", "past-context",
        "eviction-budget", "mla-rank-sweep", "mooncake-replay", "memory-wall"}) {
    EXPECT_EQ(names.count(name), 1u) << name;
  }
}

// The schema for editors lists exactly the keys the parser accepts at the top level and in
// "cache", and every compare variant may override exactly the cache keys.
TEST(ScenarioSchema, ListsTheKeysTheParserAccepts) {
  std::ifstream in(kDir / "scenario.schema.json");
  ASSERT_TRUE(in) << "scenarios/scenario.schema.json";
  const nlohmann::json schema = nlohmann::json::parse(in);
  auto keys_of = [](const nlohmann::json& props) {
    std::set<std::string> out;
    for (const auto& [k, v] : props.items()) out.insert(k);
    return out;
  };
  const auto top = scenario_top_level_keys(), cache = scenario_cache_keys();
  EXPECT_EQ(keys_of(schema["properties"]), std::set<std::string>(top.begin(), top.end()));
  EXPECT_EQ(keys_of(schema["properties"]["cache"]["properties"]),
            std::set<std::string>(cache.begin(), cache.end()));
  EXPECT_EQ(keys_of(schema["properties"]["compare"]["additionalProperties"]["properties"]),
            std::set<std::string>(cache.begin(), cache.end()));
  EXPECT_EQ(schema["additionalProperties"], false);
  EXPECT_EQ(schema["properties"]["cache"]["additionalProperties"], false);
}

}  // namespace
}  // namespace kvscope

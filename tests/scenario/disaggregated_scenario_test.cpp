// scenarios/disaggregated.json: the figures its captions and docs/concepts/disaggregation.md quote
// come out of the scenario as kvscope disagg runs it (parse, the bookkeeping model, each variant
// colocated and disaggregated).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <optional>

#include "engine/scenario/scenario.h"
#include "engine/sched/disagg.h"

namespace kvscope {
namespace {

DisaggComparison run_variant(const std::string& variant) {
  const Scenario s = parse_scenario(
      (std::filesystem::path(KVSCOPE_SOURCE_DIR) / "scenarios" / "disaggregated.json").string());
  const ScenarioModelLoad loaded = load_scenario_model(s, "", false, WeightFormat::kNative);
  EXPECT_EQ(loaded.weights, nullptr) << "the scenario is bookkeeping only";
  const ResolvedRun run = resolve_scenario(s, variant, loaded.shape, nullptr);
  EXPECT_TRUE(run.disaggregation.has_value());
  std::optional<DisaggComparison> both = run_both(
      run.config, *run.disaggregation, SimModel{loaded.shape, loaded.weights}, run.requests);
  EXPECT_TRUE(both.has_value());
  return *both;
}

// Milliseconds, rounded as the captions print them.
double ms(double seconds, double places = 100) {
  return std::round(seconds * 1e3 * places) / places;
}

TEST(DisaggregatedScenario, TheCaptionsNumbersHold) {
  const DisaggComparison base = run_variant("base");
  const DisaggSummary co = summarize(base.colocated), di = summarize(base.disaggregated);
  EXPECT_EQ(co.finished, 24);
  EXPECT_EQ(di.finished, 24);
  EXPECT_EQ(ms(co.tpot_p90), 7.47);
  EXPECT_EQ(ms(di.tpot_p90), 5.57);
  EXPECT_EQ(ms(co.ttft_mean), 19.40);
  EXPECT_EQ(ms(di.ttft_mean), 24.79);
  EXPECT_EQ(ms(di.transfer), 0.09);
  EXPECT_EQ(ms(di.first_decode), 8.19);
  // 999 tokens in blocks of 16, 128 KiB a token in fp16.
  EXPECT_EQ(base.disaggregated.requests[0].transfer_blocks, 63);
  EXPECT_EQ(base.disaggregated.requests[0].transfer_bytes, 63LL * 16 * 131072);
  // Colocated, a step with a 1,000-token prefill in it takes 16.7 ms; a decode step 5.5 ms.
  EXPECT_EQ(std::round(co.prefill * 1e4) / 10, 16.7);
  EXPECT_EQ(std::round(di.tpot_mean * 1e4) / 10, 5.5);

  const DisaggComparison slow = run_variant("ethernet-25g");
  EXPECT_EQ(std::round(63.0 * 16 * 131072 / (25e9 / 8) * 1e3), 42);  // 42 ms a request
  EXPECT_EQ(ms(summarize(slow.disaggregated).ttft_mean), 265.75);
  const DisaggComparison int8 = run_variant("int8");
  const DisaggSummary i8 = summarize(int8.disaggregated);
  EXPECT_EQ(ms(i8.ttft_mean), 44.76);
  EXPECT_EQ(std::round(i8.transfer * 1e3), 21);
  EXPECT_EQ(ms(i8.transfer), 21.48);
}

}  // namespace
}  // namespace kvscope

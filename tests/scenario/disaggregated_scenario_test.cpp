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

DisaggComparison run_variant(const std::string& variant,
                             const std::string& file = "disaggregated.json") {
  const Scenario s =
      parse_scenario((std::filesystem::path(KVSCOPE_SOURCE_DIR) / "scenarios" / file).string());
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

// scenarios/disaggregated-chat.json: four-turn conversations, prefix caching on both GPUs. The
// decode GPU's cache keeps each conversation's history off the link; the figures its captions
// quote.
TEST(DisaggregatedScenario, TheDecodeCacheKeepsTheHistoryOffTheLink) {
  const DisaggComparison base = run_variant("base", "disaggregated-chat.json");
  const DisaggComparison off = run_variant("decode-cache-off", "disaggregated-chat.json");
  const DisaggReport& di = base.disaggregated;
  EXPECT_TRUE(di.decode_prefix_caching);
  EXPECT_FALSE(off.disaggregated.decode_prefix_caching);
  std::int64_t prompt = 0;
  for (const RequestTiming& t : di.requests) prompt += t.prompt_tokens;
  EXPECT_EQ(prompt, 38176);
  EXPECT_EQ(di.instances[0].prefix_hit_tokens, 22272);  // the prefill GPU's cache
  EXPECT_EQ(base.colocated.instances[0].prefix_hit_tokens, 22272);
  EXPECT_EQ(di.instances[0].prefill_tokens, 38176 - 22272);
  // Every prompt block but those the decode GPU held crosses; without its cache, all of them.
  EXPECT_EQ(di.transfer_blocks, 992);
  EXPECT_EQ(di.decode_cached_blocks, 1392);
  EXPECT_EQ(off.disaggregated.transfer_blocks, 992 + 1392);
  EXPECT_EQ(off.disaggregated.decode_cached_blocks, 0);
  EXPECT_EQ(di.transfer_bytes, 992LL * 16 * 131072);                  // 1.94 GiB
  EXPECT_EQ(off.disaggregated.transfer_bytes, 2384LL * 16 * 131072);  // 4.66 GiB
  // The first turn of each conversation has nothing cached; a later turn finds at least the
  // earlier prompt's whole blocks.
  int first_turns = 0;
  for (const RequestTiming& t : di.requests) {
    if (t.decode_cached_blocks == 0) ++first_turns;
    EXPECT_EQ(t.transfer_blocks + t.decode_cached_blocks, (t.prompt_tokens - 1 + 15) / 16)
        << "request " << t.id;
  }
  EXPECT_EQ(first_turns, 8);
  // The tokens generated and the decode GPU's steps do not depend on what crossed.
  EXPECT_EQ(di.instances[1].decode_tokens, off.disaggregated.instances[1].decode_tokens);

  EXPECT_EQ(ms(summarize(base.colocated).ttft_mean), 10.77);
  const DisaggComparison slow = run_variant("ethernet-25g", "disaggregated-chat.json");
  const DisaggComparison slow_off =
      run_variant("ethernet-25g-decode-cache-off", "disaggregated-chat.json");
  EXPECT_EQ(ms(summarize(slow.disaggregated).ttft_mean), 35.87);
  EXPECT_EQ(ms(summarize(slow_off.disaggregated).ttft_mean), 65.77);
}

}  // namespace
}  // namespace kvscope

// The minimal scenario parser: a valid file, and one precise error per kind of mistake.
#include <gtest/gtest.h>

#include "engine/common/error.h"
#include "engine/sched/scenario_min.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_min_scenario_text(text, "s.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

constexpr const char* kGood = R"({
  "title": "t", "cache": {"block_size": 8, "num_blocks": 40, "allocator": "contiguous",
  "preemption": "swap", "victim": "longest", "host_blocks": 5, "max_seq_len": 128},
  "scheduler": {"max_tokens_per_step": 32},
  "requests": [{"arrival_step": 2, "prompt": "Once upon a time", "max_new_tokens": 10},
               {"prompt_tokens": [1, 5, 9], "max_new_tokens": 3, "priority": 2}]})";

TEST(ScenarioMin, ParsesEveryField) {
  const MinScenario s = parse_min_scenario_text(kGood, "s.json");
  EXPECT_EQ(s.config.title, "t");
  EXPECT_EQ(s.config.block_size, 8);
  EXPECT_EQ(s.config.num_blocks, 40);
  EXPECT_EQ(s.config.allocator, AllocatorKind::kContiguous);
  EXPECT_EQ(s.config.preemption, PreemptionMode::kSwap);
  EXPECT_EQ(s.config.victim, VictimPolicy::kLongest);
  EXPECT_EQ(s.config.host_blocks, 5);
  EXPECT_EQ(s.config.max_seq_len, 128);
  EXPECT_EQ(s.config.max_tokens_per_step, 32);
  ASSERT_EQ(s.requests.size(), 2u);
  EXPECT_EQ(s.requests[0].arrival_step, 2);
  EXPECT_EQ(*s.requests[0].prompt, "Once upon a time");
  EXPECT_EQ(s.requests[1].prompt_tokens, (std::vector<int>{1, 5, 9}));
  EXPECT_EQ(s.requests[1].priority, 2);
  const auto& m = testing::real_model();
  const auto reqs = resolve_requests(s, m.tokenizer.get());
  EXPECT_EQ(reqs[0].prompt_tokens, m.tokenizer->encode("Once upon a time", true, false));
}

TEST(ScenarioMin, PoolBytesBecomesBlocks) {
  const MinScenario s = parse_min_scenario_text(
      R"({"cache": {"block_size": 16, "pool_bytes": 1000000}, "requests": [{"prompt": "a", "max_new_tokens": 1}]})",
      "s.json");
  const ModelConfig& shape = testing::real_model().model->config();
  const SimConfig c = resolve_sim_config(s, shape);
  const long block_bytes = 2L * shape.n_layers * shape.n_kv_heads * shape.head_dim() * 4 * 16;
  EXPECT_EQ(c.num_blocks, 1000000 / block_bytes);
}

TEST(ScenarioMin, ErrorsNameFilePathValueAndExpectation) {
  EXPECT_EQ(
      error_of(
          R"({"cache": {"num_blocks": 4}, "requests": [{"prompt": "a", "max_new_tokens": 1}], "extra": 1})"),
      "s.json: extra: expected one of the keys cache, model, requests, sampler, scheduler, title, got "
      "unknown key \"extra\"");
  EXPECT_EQ(
      error_of(
          R"({"cache": {"num_blocks": 4, "blok_size": 3}, "requests": [{"prompt": "a", "max_new_tokens": 1}]})")
          .rfind("s.json: cache.blok_size: expected one of the keys", 0),
      0u);
  EXPECT_EQ(
      error_of(
          R"({"cache": {"num_blocks": 4}, "requests": [{"prompt_tokens": [1, -4], "max_new_tokens": 1}]})"),
      "s.json: requests[0].prompt_tokens[1]: expected an integer in [0, 1073741824], got -4");
  EXPECT_EQ(
      error_of(
          R"({"cache": {"num_blocks": 4, "allocator": "buddy"}, "requests": [{"prompt": "a", "max_new_tokens": 1}]})"),
      "s.json: cache.allocator: expected \"paged\" or \"contiguous\", got \"buddy\"");
  EXPECT_EQ(
      error_of(
          R"({"cache": {"num_blocks": 4, "victim": "oldest"}, "requests": [{"prompt": "a", "max_new_tokens": 1}]})")
          .rfind("s.json: cache.victim: expected \"last_admitted\"", 0),
      0u);
  EXPECT_EQ(
      error_of(
          R"({"cache": {"num_blocks": 4}, "requests": [{"prompt": "a", "prompt_tokens": [1], "max_new_tokens": 1}]})"),
      "s.json: requests[0]: expected exactly one of \"prompt\" (text) or \"prompt_tokens\" (ids), "
      "got both");
  EXPECT_EQ(error_of(R"({"cache": {"num_blocks": 4}, "requests": [{"prompt": "a"}]})"),
            "s.json: requests[0].max_new_tokens: expected an integer >= 1, got nothing (missing)");
  EXPECT_EQ(
      error_of(
          R"({"cache": {"num_blocks": 4, "pool_bytes": 9}, "requests": [{"prompt": "a", "max_new_tokens": 1}]})"),
      "s.json: cache: expected exactly one of \"num_blocks\" or \"pool_bytes\", got both");
  EXPECT_EQ(
      error_of(
          R"({"cache": {"num_blocks": "many"}, "requests": [{"prompt": "a", "max_new_tokens": 1}]})"),
      "s.json: cache.num_blocks: expected an integer in [1, 50000000], got \"many\"");
  EXPECT_EQ(error_of(R"({"cache": {"num_blocks": 4}, "requests": []})"),
            "s.json: requests: expected a non-empty array of requests, got []");
  EXPECT_EQ(error_of("{\"cache\": ").rfind("s.json: byte ", 0), 0u);
  EXPECT_NE(error_of("{\"cache\": ").find("expected valid JSON"), std::string::npos);
}

TEST(ScenarioMin, ShippedScenariosParse) {
  for (const char* name : {"minimal.json", "mixed-lengths.json"}) {
    EXPECT_NO_THROW(parse_min_scenario(std::string(KVSCOPE_SOURCE_DIR) + "/scenarios/" + name))
        << name;
  }
}

}  // namespace
}  // namespace kvscope

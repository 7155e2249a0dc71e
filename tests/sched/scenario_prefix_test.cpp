// Scenario keys for prefix caching, parallel sampling and the sampler; pool_bytes holds more
// blocks (and so more tokens) for smaller KV formats.
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

TEST(ScenarioPrefix, ParsesCachingSamplingAndN) {
  const MinScenario s = parse_min_scenario_text(
      R"({"cache": {"num_blocks": 8, "prefix_caching": true, "prefix_index": "radix",
                    "cached_block_eviction": "lfu"},
          "sampler": {"temperature": 0.7, "top_p": 0.5, "seed": 3},
          "requests": [{"prompt": "a", "max_new_tokens": 2, "n": 3}]})",
      "s.json");
  EXPECT_TRUE(s.config.prefix_caching);
  EXPECT_EQ(s.config.prefix_index, IndexKind::kRadix);
  EXPECT_EQ(s.config.cached_block_eviction, EvictionPolicyKind::kLfu);
  EXPECT_FLOAT_EQ(s.config.sampler.temperature, 0.7f);
  EXPECT_FLOAT_EQ(s.config.sampler.top_p, 0.5f);
  EXPECT_EQ(s.config.sampler.seed, 3u);
  EXPECT_EQ(resolve_requests(s, testing::real_model().tokenizer.get())[0].n_samples, 3);
}

TEST(ScenarioPrefix, ClearErrors) {
  EXPECT_EQ(error_of(R"({"cache": {"num_blocks": 8, "allocator": "contiguous",
      "prefix_caching": true}, "requests": [{"prompt": "a", "max_new_tokens": 1}]})"),
            "s.json: cache.prefix_caching: expected the paged allocator (contiguous regions are "
            "private to one request), got allocator \"contiguous\"");
  EXPECT_EQ(error_of(R"({"cache": {"num_blocks": 8, "prefix_caching": true,
      "prefix_index": "trie"}, "requests": [{"prompt": "a", "max_new_tokens": 1}]})"),
            "s.json: cache.prefix_index: expected \"hash\" or \"radix\", got \"trie\"");
  EXPECT_EQ(error_of(R"({"cache": {"num_blocks": 8, "prefix_caching": 1},
      "requests": [{"prompt": "a", "max_new_tokens": 1}]})"),
            "s.json: cache.prefix_caching: expected true or false, got 1");
  EXPECT_EQ(error_of(R"({"cache": {"num_blocks": 8},
      "requests": [{"prompt": "a", "max_new_tokens": 1, "n": 0}]})"),
            "s.json: requests[0].n: expected an integer in [1, 256], got 0");
  EXPECT_NE(error_of(R"({"cache": {"num_blocks": 8}, "sampler": {"temperature": -1},
      "requests": [{"prompt": "a", "max_new_tokens": 1}]})")
                .find("sampler.temperature"),
            std::string::npos);
}

// A pool given in bytes: blocks = pool_bytes / block bytes, so halving the bytes per element
// doubles the blocks and the tokens the pool holds.
TEST(ScenarioPrefix, PoolBytesHoldsMoreTokensForSmallerFormats) {
  const ModelConfig& shape = testing::real_model().model->config();
  auto blocks_for = [&](const char* dtype) {
    const MinScenario s = parse_min_scenario_text(
        std::string(R"({"cache": {"block_size": 16, "pool_bytes": 4000000, "kv_dtype": ")") +
            dtype + R"("}, "requests": [{"prompt": "a", "max_new_tokens": 1}]})",
        "s.json");
    return resolve_sim_config(s, shape).num_blocks;
  };
  const int fp32 = blocks_for("fp32"), fp16 = blocks_for("fp16"), int8 = blocks_for("int8");
  EXPECT_GT(fp32, 10);
  EXPECT_NEAR(static_cast<double>(fp16) / fp32, 2.0, 0.05);
  EXPECT_GE(static_cast<double>(int8) / fp32, 3.0) << "int8 keeps per-group scales";
  EXPECT_LE(static_cast<double>(int8) / fp32, 4.0 + 1e-9);
}

}  // namespace
}  // namespace kvscope

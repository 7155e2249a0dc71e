// Scenario keys for prefix caching, parallel sampling and the sampler; pool_bytes holds more
// blocks (and so more tokens) for smaller KV formats.
#include <gtest/gtest.h>

#include "engine/common/error.h"
#include "engine/model/synthetic.h"
#include "engine/scenario/scenario.h"
#include "tests/scenario/scenario_test_support.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

using test::scenario_error;
using test::scenario_json;

std::string error_of(const std::string& cache, const std::string& extra = "",
                     const std::string& requests = R"([{"prompt": "a", "max_new_tokens": 1}])") {
  return scenario_error(scenario_json(cache, requests, extra));
}

TEST(ScenarioPrefix, ParsesCachingSamplingAndN) {
  const Scenario s =
      parse_scenario_text(scenario_json(
                              R"("num_blocks": 8, "prefix_caching": true, "prefix_index": "radix",
             "cached_block_eviction": "lfu")",
                              R"([{"prompt": "a", "max_new_tokens": 2, "n": 3}])",
                              R"(, "sampler": {"temperature": 0.7, "top_p": 0.5, "seed": 3})"),
                          "s.json");
  const auto& m = test::real_model();
  const ResolvedRun run = resolve_scenario(s, "", m.model->config(), m.tokenizer.get());
  EXPECT_TRUE(run.config.prefix_caching);
  EXPECT_EQ(run.config.prefix_index, IndexKind::kRadix);
  EXPECT_EQ(run.config.cached_block_eviction, EvictionPolicyKind::kLfu);
  EXPECT_FLOAT_EQ(run.config.sampler.temperature, 0.7f);
  EXPECT_FLOAT_EQ(run.config.sampler.top_p, 0.5f);
  EXPECT_EQ(run.config.sampler.seed, 3u);
  EXPECT_EQ(run.requests[0].n_samples, 3);
}

TEST(ScenarioPrefix, ClearErrors) {
  EXPECT_EQ(error_of(R"("num_blocks": 8, "allocator": "contiguous", "prefix_caching": true)"),
            "s.json: cache.allocator: prefix caching needs the paged allocator (contiguous "
            "regions are private to one sequence and cannot be shared), got the contiguous "
            "allocator");
  EXPECT_EQ(error_of(R"("num_blocks": 8, "prefix_caching": true, "prefix_index": "trie")"),
            "s.json: cache.prefix_index: expected \"hash\" or \"radix\", got \"trie\"");
  EXPECT_EQ(error_of(R"("num_blocks": 8, "prefix_caching": 1)"),
            "s.json: cache.prefix_caching: expected true or false, got 1");
  EXPECT_EQ(error_of(R"("num_blocks": 8)", "", R"([{"prompt": "a", "max_new_tokens": 1, "n": 0}])"),
            "s.json: workload.requests[0].n: expected an integer in [1, 256], got 0");
  EXPECT_NE(error_of(R"("num_blocks": 8)", R"(, "sampler": {"temperature": -1})")
                .find("sampler.temperature"),
            std::string::npos);
}

TEST(ScenarioPrefix, TiersParseInOrderAndNeedPrefixCaching) {
  const Scenario s =
      parse_scenario_text(scenario_json(R"("num_blocks": 8, "prefix_caching": true, "tiers": [
          {"medium": "host", "blocks": 16}, {"medium": "disk", "blocks": 64, "dir": "cache"}])"),
                          "s.json");
  const auto& m = test::real_model();
  const ResolvedRun run = resolve_scenario(s, "", m.model->config(), m.tokenizer.get());
  ASSERT_EQ(run.config.tiers.size(), 2u);
  EXPECT_EQ(run.config.tiers[0].name, "host");
  EXPECT_EQ(run.config.tiers[0].medium, TierMedium::kHost);
  EXPECT_EQ(run.config.tiers[0].capacity_blocks, 16);
  EXPECT_EQ(run.config.tiers[1].medium, TierMedium::kDisk);
  EXPECT_EQ(run.config.tiers[1].capacity_blocks, 64);
  EXPECT_EQ(run.config.tiers[1].dir, "cache");
  EXPECT_TRUE(run.config.tier_prefetch);
  EXPECT_FALSE(run.config.tier_write_through);

  EXPECT_EQ(error_of(R"("num_blocks": 8, "tiers": [{"medium": "host", "blocks": 4}])"),
            "s.json: cache.tiers: needs prefix caching (the tiers hold the blocks the prefix cache "
            "evicts), got prefix caching off");
  EXPECT_EQ(error_of(R"("num_blocks": 8, "prefix_caching": true,
                        "tiers": [{"medium": "ssd", "blocks": 4}])"),
            "s.json: cache.tiers[0].medium: expected \"host\" or \"disk\", got \"ssd\"");
  EXPECT_EQ(error_of(R"("num_blocks": 8, "prefix_caching": true,
                        "tiers": [{"medium": "host", "blocks": 0}])"),
            "s.json: cache.tiers[0].blocks: expected an integer in [1, 50000000], got 0");
  EXPECT_EQ(error_of(R"("num_blocks": 8, "prefix_caching": true,
                        "tiers": [{"medium": "host", "blocks": 4, "dir": "x"}])"),
            "s.json: cache.tiers[0].dir: expected \"dir\" only on a disk tier, got a host tier");
  EXPECT_EQ(error_of(R"("num_blocks": 8, "prefix_caching": true,
                        "tiers": [{"medium": "host", "blocks": 4}], "tier_write": "around")"),
            "s.json: cache.tier_write: expected \"back\" or \"through\", got \"around\"");
  EXPECT_EQ(error_of(R"("num_blocks": 8, "prefix_caching": true, "tier_prefetch": false)"),
            "s.json: cache.tier_prefetch: expected \"tiers\" beside it, got no tiers");
  EXPECT_EQ(error_of(R"("num_blocks": 8, "prefix_caching": true, "tiers": {"host": 4})"),
            "s.json: cache.tiers: expected an array of tiers, first tier first, got {\"host\":4}");
}

// A pool given in bytes: blocks = pool_bytes / block bytes, so halving the bytes per element
// doubles the blocks and the tokens the pool holds.
TEST(ScenarioPrefix, PoolBytesHoldsMoreTokensForSmallerFormats) {
  const ModelConfig& shape = test::real_model().model->config();
  auto blocks_for = [&](const char* dtype) {
    const Scenario s = parse_scenario_text(
        scenario_json(std::string(R"("block_size": 16, "pool_bytes": 4000000, "kv_dtype": ")") +
                      dtype + "\""),
        "s.json");
    return resolve_scenario(s, "", shape, nullptr).config.num_blocks;
  };
  const int fp32 = blocks_for("fp32"), fp16 = blocks_for("fp16"), int8 = blocks_for("int8");
  EXPECT_GT(fp32, 10);
  EXPECT_NEAR(static_cast<double>(fp16) / fp32, 2.0, 0.05);
  EXPECT_GE(static_cast<double>(int8) / fp32, 3.0) << "int8 keeps per-group scales";
  EXPECT_LE(static_cast<double>(int8) / fp32, 4.0 + 1e-9);
}

// A pool given in tokens is the same number of base blocks on any model (so a scenario keeps its
// shape under --model), and its bytes are every variant's budget, as pool_bytes would be.
TEST(ScenarioPrefix, PoolTokensKeepTheShapeOnAnyModelAndTheBytesAcrossVariants) {
  const Scenario s = parse_scenario_text(
      scenario_json(R"("block_size": 16, "pool_tokens": 1000, "kv_dtype": "fp16")",
                    R"([{"prompt_tokens": [1, 2], "max_new_tokens": 1}])",
                    R"(, "compare": {"big": {"block_size": 256}, "int8": {"kv_dtype": "int8"},
                         "blocks": {"num_blocks": 5}})"),
      "s.json");
  const ModelConfig shapes[] = {test::real_model().model->config(),
                                parse_synthetic_spec("smollm2-135m").config};
  for (const ModelConfig& shape : shapes) {
    SCOPED_TRACE(shape.n_layers);
    const auto blocks = [&](const char* v) {
      return resolve_scenario(s, v, shape, nullptr).config.num_blocks;
    };
    const std::int64_t fp16_block =
        2L * shape.n_layers * shape.n_kv_heads * shape.head_dim() * 2 * 16;
    EXPECT_EQ(blocks("base"), 63) << "1000 tokens round up to 63 blocks of 16";
    EXPECT_EQ(scenario_pool_bytes(s, "base", shape), 63 * fp16_block);
    EXPECT_EQ(blocks("big"), 3) << "1,008 slots hold three blocks of 256";
    EXPECT_EQ(scenario_pool_bytes(s, "int8", shape), 63 * fp16_block);
    EXPECT_GT(blocks("int8"), 63);
    EXPECT_LT(blocks("int8"), 126);
    EXPECT_EQ(blocks("blocks"), 5);
    EXPECT_FALSE(scenario_pool_bytes(s, "blocks", shape).has_value());
  }
  EXPECT_EQ(error_of(R"("num_blocks": 4)", R"(, "compare": {"v": {"pool_tokens": 64}})"),
            "s.json: compare.v.pool_tokens: expected pool_tokens only in \"cache\" (a variant "
            "keeps the bytes they come to, or sets num_blocks or pool_bytes), got pool_tokens in "
            "a variant");
  EXPECT_EQ(error_of(R"("pool_tokens": 4, "pool_bytes": 9)"),
            "s.json: cache: expected exactly one of \"num_blocks\", \"pool_bytes\" or "
            "\"pool_tokens\", got 2 of them");
}

}  // namespace
}  // namespace kvscope

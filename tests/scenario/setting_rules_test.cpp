// #40: one rule, one check, one message. Each configuration rule lives in one engine function;
// the KV cache, the Simulator, the scenario loader and the Mooncake replay all call it, so a rule
// reads the same wherever it trips, and each caller only says where the value came from.
#include <gtest/gtest.h>

#include "engine/common/error.h"
#include "engine/common/setting_source.h"
#include "engine/evict/policy.h"
#include "engine/kv/cache_manager.h"
#include "engine/mla/mla_codec.h"
#include "engine/prefix/prefix_cache.h"
#include "engine/scenario/scenario.h"
#include "engine/sched/simulator.h"
#include "engine/trace/mooncake_replay.h"
#include "tests/scenario/scenario_test_support.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

using test::scenario_error;
using test::scenario_json;

constexpr const char* kPagedRule =
    "prefix caching needs the paged allocator (contiguous regions are private to one sequence "
    "and cannot be shared), got the contiguous allocator";
constexpr const char* kTiersRule =
    "needs prefix caching (the tiers hold the blocks the prefix cache evicts), got prefix "
    "caching off";

SimModel shape_only() {
  return SimModel{test::real_model().model->config(), nullptr};
}

std::vector<SimRequest> one_request() {
  SimRequest r;
  r.prompt_tokens = {1, 5, 9};
  r.max_new_tokens = 2;
  return {r};
}

TEST(SettingRules, PrefixCachingNeedsPagedReadsTheSameFromEveryChecker) {
  KvCacheManager cache(KvLayout{1, 1, 4, 4, 8, {}, {}}, AllocatorKind::kContiguous, 16, false);
  PrefixCache prefix(cache.pool(), PrefixCacheConfig{});
  EXPECT_EQ(test::error_of([&] { cache.set_block_source(&prefix); }),
            std::string("kv cache: ") + kPagedRule);

  SimConfig c;
  c.num_blocks = 64;
  c.prefix_caching = true;
  c.allocator = AllocatorKind::kContiguous;
  EXPECT_EQ(test::error_of([&] { Simulator sim(c, shape_only(), one_request()); }),
            std::string("cache.prefix_caching: ") + kPagedRule);

  // A variant that only switches the allocator is located at its own key.
  EXPECT_EQ(scenario_error(scenario_json(R"("num_blocks": 8, "prefix_caching": true)",
                                         R"([{"prompt_tokens": [1], "max_new_tokens": 1}])",
                                         R"(, "compare": {"c": {"allocator": "contiguous"}})")),
            std::string("s.json: compare.c.allocator: ") + kPagedRule);
  EXPECT_EQ(scenario_error(scenario_json(R"("num_blocks": 8, "allocator": "contiguous",
                                            "prefix_caching": true)")),
            std::string("s.json: cache.allocator: ") + kPagedRule);
}

TEST(SettingRules, TiersNeedPrefixCachingReadsTheSameFromEveryChecker) {
  SimConfig c;
  c.num_blocks = 64;
  c.tiers = {{"host", TierMedium::kHost, 4, ""}};
  EXPECT_EQ(test::error_of([&] { Simulator sim(c, shape_only(), one_request()); }),
            std::string("cache.tiers: ") + kTiersRule);

  EXPECT_EQ(scenario_error(scenario_json(R"("num_blocks": 8,
                                            "tiers": [{"medium": "host", "blocks": 4}])")),
            std::string("s.json: cache.tiers: ") + kTiersRule);

  MooncakeReplayConfig m;
  m.capacity_tokens = 4096;
  m.prefix_caching = false;
  m.tiers = {TierSpec{"host", 16}};
  EXPECT_EQ(test::error_of([&] { (void)replay_mooncake(MooncakeTrace{}, m); }),
            std::string("mooncake replay: tiers: ") + kTiersRule);
}

TEST(SettingRules, EvictionRulesNameTheSettingOrTheKeyThatCarriedIt) {
  EvictionConfig e;
  e.kind = EvictionKind::kSinksWindow;
  e.budget = 8;
  e.sinks = 7;
  EXPECT_EQ(test::error_of([&] { validate(e); }),
            "sink tokens: expected an integer in [0, budget - 1) = [0, 7), got 7");
  e.kind = EvictionKind::kH2O;
  e.sinks = -1;
  EXPECT_EQ(test::error_of([&] { validate(e); }), "sink tokens: expected an integer >= 0, got -1");
  e.sinks = 0;
  e.budget = 1;
  EXPECT_EQ(test::error_of([&] { validate(e); }),
            "eviction budget: expected an integer >= 2, got 1");
  e.kind = EvictionKind::kNone;  // nothing to check without an evictor
  validate(e);

  // The scenario loader runs the same checks when it reads the file, at its keys.
  EXPECT_EQ(scenario_error(scenario_json(
                R"("num_blocks": 8, "token_eviction": {"policy": "window", "budget": 1})")),
            "s.json: cache.token_eviction.budget: expected an integer >= 2, got 1");
  EXPECT_EQ(scenario_error(scenario_json(
                R"("num_blocks": 8, "token_eviction": {"policy": "sinks", "budget": 8,
                   "sinks": 7})")),
            "s.json: cache.token_eviction.sinks: expected an integer in [0, budget - 1) = [0, "
            "7), got 7");
  EXPECT_EQ(scenario_error(scenario_json(
                R"("num_blocks": 8, "token_eviction": {"policy": "snapkv", "budget": 8,
                   "pool_kernel": 4})")),
            "s.json: cache.token_eviction.pool_kernel: expected an odd integer >= 1, got 4");
}

TEST(SettingRules, MlaRulesNameTheSettingOrTheKeyThatCarriedIt) {
  const ModelConfig& c = test::real_model().model->config();
  MlaOptions o;
  o.rank = 0;
  const std::string rank_error = test::error_of([&] { validate(o, c); });
  EXPECT_EQ(
      rank_error.rfind(
          "MLA rank: expected an integer in [1, " + std::to_string(mla_full_rank(c, 0)) + "]", 0),
      0u)
      << rank_error;
  o.rank = 4;
  o.rope_dims = 2;  // mode A keeps no RoPE dims
  EXPECT_EQ(test::error_of([&] { validate(o, c); }),
            "MLA RoPE dims: expected 0 in mode a (mode a re-applies RoPE to every key dim), got 2");

  // A scenario's rank past the model's full rank, checked on the shape before weights load.
  const Scenario s =
      parse_scenario_text(scenario_json(R"("num_blocks": 8, "mla": {"rank": 4096})",
                                        R"([{"prompt_tokens": [1], "max_new_tokens": 1}])"),
                          "s.json");
  const std::string e = test::error_of([&] { (void)resolve_scenario(s, "", c, nullptr); });
  EXPECT_EQ(e.rfind("s.json: cache.mla.rank: expected an integer in [1, ", 0), 0u) << e;
  EXPECT_NE(e.find("got 4096"), std::string::npos) << e;
}

// Sparse attention's rules: the engine's words from validate(), the flag from the CLI (tests/cli),
// the JSON key from a scenario (the shape's checks at resolve time), and the Simulator's own
// refusals (beside eviction, without weights).
TEST(SettingRules, SparseAttentionRulesNameTheSettingOrTheKeyThatCarriedIt) {
  const ModelConfig& c = test::real_model().model->config();
  SparseOptions o;
  o.selector = SelectorKind::kQuest;
  o.topk = 8;
  EXPECT_EQ(test::error_of([&] { validate(o, c, 16); }),
            "sparse attention's k: expected at least the block size 16 for quest (it attends "
            "whole blocks), got 8");
  const auto resolve_error = [&](const std::string& cache) {
    const Scenario s = parse_scenario_text(
        scenario_json(cache, R"([{"prompt_tokens": [1], "max_new_tokens": 1}])"), "s.json");
    return test::error_of([&] { (void)resolve_scenario(s, "", c, nullptr); });
  };
  EXPECT_EQ(
      resolve_error(R"("num_blocks": 8, "sparse_attention": {"selector": "quest", "topk": 8})"),
      "s.json: cache.sparse_attention.topk: expected at least the block size 16 for quest "
      "(it attends whole blocks), got 8");
  EXPECT_EQ(
      resolve_error(R"("num_blocks": 8, "sparse_attention": {"selector": "oracle", "topk": 8,)"
                    R"( "dense_layers": 6})"),
      "s.json: cache.sparse_attention.dense_layers: expected an integer in [0, 5] (the "
      "model's layers), got 6");
  EXPECT_EQ(
      resolve_error(R"("num_blocks": 8, "sparse_attention": {"selector": "oracle", "topk": 8},)"
                    R"( "token_eviction": {"policy": "window", "budget": 8})"),
      "s.json: cache.sparse_attention: expected no token eviction or MLA beside it (selection "
      "keeps the whole K/V cache), got cache.token_eviction");
  EXPECT_EQ(
      scenario_error(
          scenario_json(R"("num_blocks": 8, "sparse_attention": {"selector": "h2o", "topk": 8})")),
      "s.json: cache.sparse_attention.selector: expected oracle, quest, proxy or sparq, got h2o");
  EXPECT_NE(scenario_error(
                scenario_json(R"("num_blocks": 8, "sparse_attention": {"selector": "oracle"})"))
                .find("cache.sparse_attention.topk"),
            std::string::npos);
  // The Simulator: a bookkeeping run has no attention to select in.
  SimConfig sc;
  sc.num_blocks = 64;
  sc.sparse_attention = SparseOptions{};
  EXPECT_EQ(test::error_of([&] { Simulator sim(sc, shape_only(), one_request()); }),
            "cache.sparse_attention: expected a model with weights (a bookkeeping run computes no "
            "attention to select in), got no weights");
}

TEST(SettingRules, SettingSourcesRelocateOnlyTheirOwnSettings) {
  auto budget_error = [] { throw Error(std::string(kEvictionBudget), "expected 2, got 1"); };
  EXPECT_EQ(test::error_of([&] {
              with_setting_sources({{kEvictionBudget, "--budget"}}, budget_error);
            }),
            "--budget: expected 2, got 1");
  // An error about another setting, or about no setting, keeps its own location.
  EXPECT_EQ(test::error_of([&] {
              with_setting_sources({{kEvictionSinks, "--sinks"}}, budget_error);
            }),
            "eviction budget: expected 2, got 1");
  EXPECT_EQ(with_setting_sources({{kEvictionSinks, "--sinks"}}, [] { return 7; }), 7);
}

}  // namespace
}  // namespace kvscope

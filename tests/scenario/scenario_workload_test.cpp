// Scenario workloads (named prefixes, generators, Mooncake slices) and compare variants.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "engine/common/error.h"
#include "engine/scenario/scenario.h"
#include "engine/trace/mooncake.h"
#include "tests/scenario/scenario_test_support.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

using test::scenario_error;

std::string doc(const std::string& workload, const std::string& extra = "") {
  return R"({"format_version": 1, "cache": {"num_blocks": 64, "block_size": 16},
             "workload": )" +
         workload + extra + "}";
}

std::vector<SimRequest> expand(const std::string& text) {
  const auto& m = test::real_model();
  return resolve_scenario(parse_scenario_text(text, "s.json"), "", m.model->config(),
                          m.tokenizer.get())
      .requests;
}

TEST(ScenarioWorkload, NamedPrefixIsSharedTokenForToken) {
  const auto reqs = expand(doc(R"({"prefixes": {"sys": "You are a kind storyteller."},
      "requests": [{"prompt": {"prefix": "sys", "suffix": "a cat"}, "max_new_tokens": 2},
                   {"prompt": {"prefix": "sys", "suffix": "a dog"}, "max_new_tokens": 2}]})"));
  const Tokenizer& tok = *test::real_model().tokenizer;
  const auto prefix = tok.encode("You are a kind storyteller.", true, false);
  ASSERT_EQ(reqs.size(), 2u);
  for (const auto& r : reqs) {
    ASSERT_GT(r.prompt_tokens.size(), prefix.size());
    EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), r.prompt_tokens.begin()));
  }
  EXPECT_NE(reqs[0].prompt_tokens, reqs[1].prompt_tokens);
  EXPECT_EQ(scenario_error(doc(R"({"prefixes": {"sys": "x"},
      "requests": [{"prompt": {"prefix": "sis"}, "max_new_tokens": 2}]})")),
            "s.json: workload.requests[0].prompt.prefix: expected a name in workload.prefixes "
            "(did you mean \"sys\"?), got \"sis\"");
}

TEST(ScenarioWorkload, GeneratorsAreSeededAndDeterministic) {
  const std::string text = doc(R"({"prefixes": {"sys": "Once upon a time there was a cat."},
      "generators": [
        {"type": "shared_prefix", "prefix": "sys", "count": 5, "suffix_tokens": {"dist": "uniform", "min": 3, "max": 9},
         "max_new_tokens": 4, "arrival": {"start": 2, "every": 3}, "n": 2},
        {"type": "chat", "conversations": 2, "turns": 3, "user_tokens": 5, "max_new_tokens": 7,
         "arrival": {"every": 10}, "turn_gap": 4},
        {"type": "random", "count": 20, "seed": 9,
         "prompt_tokens": {"dist": "lognormal", "median": 40, "sigma": 0.8, "min": 8, "max": 200},
         "max_new_tokens": {"dist": "uniform", "min": 1, "max": 50}}]})");
  const auto a = expand(text), b = expand(text);
  ASSERT_EQ(a.size(), 5u + 6u + 20u);
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt_tokens, b[i].prompt_tokens) << i;
    EXPECT_EQ(a[i].max_new_tokens, b[i].max_new_tokens) << i;
    EXPECT_EQ(a[i].arrival_step, b[i].arrival_step) << i;
  }
  // Shared-prefix group: arrivals start + i * every, n samples, suffix lengths within the range.
  const auto prefix =
      test::real_model().tokenizer->encode("Once upon a time there was a cat.", true, false);
  for (int i = 0; i < 5; ++i) {
    const SimRequest& r = a[static_cast<std::size_t>(i)];
    EXPECT_EQ(r.arrival_step, 2 + 3 * i);
    EXPECT_EQ(r.n_samples, 2);
    EXPECT_GE(r.prompt_tokens.size(), prefix.size() + 3);
    EXPECT_LE(r.prompt_tokens.size(), prefix.size() + 9);
    EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), r.prompt_tokens.begin()));
  }
  // Chat: each turn's prompt extends the previous turn's prompt by its stand-in reply (7) and
  // the next user message (5); turns arrive turn_gap apart, conversations `every` apart.
  for (int c = 0; c < 2; ++c) {
    for (int t = 0; t < 3; ++t) {
      const SimRequest& r = a[static_cast<std::size_t>(5 + 3 * c + t)];
      EXPECT_EQ(r.arrival_step, 10 * c + 4 * t);
      EXPECT_EQ(r.prompt_tokens.size(), static_cast<std::size_t>(1 + 5 + t * (7 + 5)));
      if (t > 0) {
        const auto& prev = a[static_cast<std::size_t>(5 + 3 * c + t - 1)].prompt_tokens;
        EXPECT_TRUE(std::equal(prev.begin(), prev.end(), r.prompt_tokens.begin()));
      }
    }
  }
  // Random lengths: within [8, 200], not all equal; ids never special tokens.
  std::set<std::size_t> lengths;
  for (std::size_t i = 11; i < a.size(); ++i) {
    lengths.insert(a[i].prompt_tokens.size());
    EXPECT_GE(a[i].prompt_tokens.size(), 8u);
    EXPECT_LE(a[i].prompt_tokens.size(), 200u);
    EXPECT_EQ(a[i].prompt_tokens[0], 1);
    for (std::size_t k = 1; k < a[i].prompt_tokens.size(); ++k) EXPECT_GE(a[i].prompt_tokens[k], 3);
  }
  EXPECT_GT(lengths.size(), 5u);
}

TEST(ScenarioWorkload, GeneratorErrors) {
  EXPECT_EQ(scenario_error(doc(R"({"generators": [{"type": "burst", "count": 2}]})")),
            "s.json: workload.generators[0].type: expected \"shared_prefix\", \"chat\" or "
            "\"random\", got \"burst\"");
  EXPECT_EQ(scenario_error(doc(R"({"generators": [{"type": "random", "count": 2,
      "prompt_tokens": {"dist": "uniform", "min": 9, "max": 3}, "max_new_tokens": 1}]})")),
            "s.json: workload.generators[0].prompt_tokens.max: expected an integer in [9, "
            "1048576], got 3");
  EXPECT_EQ(scenario_error(doc(R"({"generators": [{"type": "random", "count": 2,
      "prompt_tokens": 4, "max_new_tokens": 1, "turns": 3}]})"))
                .rfind("s.json: workload.generators[0].turns: expected one of the keys", 0),
            0u);
  EXPECT_EQ(scenario_error(doc(R"({"generators": [{"type": "chat", "conversations": 1000,
      "turns": 1000, "user_tokens": 4, "max_new_tokens": 1}]})")),
            "s.json: workload.generators[0].turns: expected conversations x turns at most 100000, "
            "got 1000000");
}

// A scripted chat: turn t's prompt is the system prompt, then every earlier turn's user message
// and reply, then its own user message, token for token as each text encodes on its own.
TEST(ScenarioWorkload, ScriptedChatTurnsExtendTheConversationWithItsTexts) {
  const auto reqs = expand(doc(R"({"prefixes": {"sys": "You tell stories."},
      "generators": [{"type": "chat", "prefix": "sys", "max_new_tokens": 6, "turn_gap": 9,
        "arrival": {"start": 1, "every": 4},
        "script": [[{"user": " Tell me about a cat.", "reply": " The cat slept."},
                    {"user": " And a dog?", "reply": " The dog ran."},
                    {"user": " Which is happier?"}],
                   [{"user": " Hello."}]]}]})"));
  const Tokenizer& tok = *test::real_model().tokenizer;
  auto ids = [&](const char* text) { return tok.encode(text, false, false); };
  std::vector<int> want = tok.encode("You tell stories.", true, false);
  const std::vector<int> sys = want;
  ASSERT_EQ(reqs.size(), 4u);
  const char* users[] = {" Tell me about a cat.", " And a dog?", " Which is happier?"};
  const char* replies[] = {" The cat slept.", " The dog ran."};
  for (int t = 0; t < 3; ++t) {
    const auto u = ids(users[t]);
    want.insert(want.end(), u.begin(), u.end());
    EXPECT_EQ(reqs[static_cast<std::size_t>(t)].prompt_tokens, want) << "turn " << t;
    EXPECT_EQ(reqs[static_cast<std::size_t>(t)].arrival_step, 1 + 9 * t);
    EXPECT_EQ(reqs[static_cast<std::size_t>(t)].max_new_tokens, 6);
    if (t < 2) {
      const auto r = ids(replies[t]);
      want.insert(want.end(), r.begin(), r.end());
    }
  }
  std::vector<int> second = sys;
  const auto hello = ids(" Hello.");
  second.insert(second.end(), hello.begin(), hello.end());
  EXPECT_EQ(reqs[3].prompt_tokens, second);
  EXPECT_EQ(reqs[3].arrival_step, 5);
}

TEST(ScenarioWorkload, ScriptedChatErrors) {
  EXPECT_EQ(scenario_error(doc(R"({"generators": [{"type": "chat", "max_new_tokens": 2,
      "turns": 2, "script": [[{"user": "a"}]]}]})")),
            "s.json: workload.generators[0].turns: expected no \"turns\" beside \"script\" (the "
            "script sets it), got both");
  EXPECT_EQ(scenario_error(doc(R"({"generators": [{"type": "chat", "max_new_tokens": 2,
      "script": [[{"user": "a"}, {"user": "b"}]]}]})")),
            "s.json: workload.generators[0].script[0][0].reply: expected the reply the next "
            "turn's history holds (text), got nothing (missing)");
  EXPECT_EQ(scenario_error(doc(R"({"generators": [{"type": "chat", "max_new_tokens": 2,
      "script": [[]]}]})")),
            "s.json: workload.generators[0].script[0]: expected a non-empty array of turns "
            "{\"user\": text, \"reply\": text}, got []");
  EXPECT_EQ(scenario_error(doc(R"({"generators": [{"type": "chat", "max_new_tokens": 2,
      "script": [[{"user": "a", "replies": "b"}]]}]})"))
                .rfind("s.json: workload.generators[0].script[0][0].replies: expected one of the "
                       "keys",
                       0),
            0u);
  EXPECT_EQ(scenario_error(doc(R"({"generators": [{"type": "chat", "max_new_tokens": 2}]})")),
            "s.json: workload.generators[0].conversations: expected an integer >= 1 (or a "
            "\"script\" of texts instead), got nothing (missing)");
}

TEST(ScenarioWorkload, MooncakeSliceAndTimeScale) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "kvscope_sc_trace";
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir / "t.jsonl");
    f << R"({"timestamp": 1000, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]})"
      << "\n"
      << R"({"timestamp": 1100, "input_length": 700, "output_length": 4, "hash_ids": [1, 3]})"
      << "\n"
      << R"({"timestamp": 1400, "input_length": 100, "output_length": 5, "hash_ids": [9]})"
      << "\n";
  }
  const std::string path = (dir / "s.json").string();
  auto run = [&](const std::string& trace) {
    const Scenario s = parse_scenario_text(doc(R"({"trace": )" + trace + "}"), path);
    return resolve_scenario(s, "", test::real_model().model->config(), nullptr).requests;
  };
  const auto all = run(R"({"mooncake": "t.jsonl", "step_ms": 10})");
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[1].arrival_step, 10);
  EXPECT_EQ(all[2].arrival_step, 40);
  EXPECT_EQ(all[0].prompt_tokens.size(), 600u);
  EXPECT_EQ(all[2].max_new_tokens, 5);
  // The first 512 tokens (hash id 1) are the same block in requests 0 and 1.
  EXPECT_TRUE(std::equal(all[0].prompt_tokens.begin(), all[0].prompt_tokens.begin() + 512,
                         all[1].prompt_tokens.begin()));
  const auto fast = run(R"({"mooncake": "t.jsonl", "first": 1, "count": 2, "time_scale": 2})");
  ASSERT_EQ(fast.size(), 2u);
  EXPECT_EQ(fast[0].arrival_step, 0);
  EXPECT_EQ(fast[1].arrival_step, 7);  // (1400 - 1100) / 2 / 20 = 7.5
  try {
    run(R"({"mooncake": "t.jsonl", "first": 2, "count": 5})");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path +
                                         ": workload.trace.count: expected a slice inside the "
                                         "trace's 3 requests, got first 2, count 5");
  }
  try {
    run(R"({"mooncake": "nope.jsonl"})");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("workload.trace.mooncake: expected a trace file (looked at"),
        std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(ScenarioCompare, VariantsOverrideTheBaseCache) {
  const Scenario s = parse_scenario_text(
      test::scenario_json(R"("num_blocks": 64, "block_size": 16, "kv_dtype": "fp16")",
                          R"([{"prompt_tokens": [1, 5], "max_new_tokens": 1}])",
                          R"(, "compare": {"int8": {"kv_dtype": "int8"},
          "tiny": {"block_size": 1, "pool_bytes": 100000}, "keys": {"k_dtype": "int4"}})"),
      "s.json");
  EXPECT_EQ(s.variant_names(), (std::vector<std::string>{"base", "int8", "tiny", "keys"}));
  EXPECT_EQ(s.variant("int8").sim.k_format.name(), "int8");
  EXPECT_EQ(s.variant("int8").sim.block_size, 16);
  EXPECT_EQ(s.variant("tiny").sim.block_size, 1);
  EXPECT_EQ(s.variant("tiny").sim.k_format.name(), "fp16");
  EXPECT_TRUE(s.variant("tiny").pool_bytes.has_value());
  EXPECT_EQ(s.variant("keys").sim.k_format.name(), "int4");
  EXPECT_EQ(s.variant("keys").sim.v_format.name(), "fp16");
  EXPECT_EQ(s.variant("base").sim.num_blocks, 64);
  try {
    s.variant("int9");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "s.json: compare: expected a variant name (base, int8, tiny, keys), got \"int9\" "
              "(did you mean \"int8\"?)");
  }
  EXPECT_EQ(scenario_error(test::scenario_json(R"("num_blocks": 4)",
                                               R"([{"prompt": "a", "max_new_tokens": 1}])",
                                               R"(, "compare": {"x": {"blocksize": 4}})"))
                .rfind("s.json: compare.x.blocksize: expected one of the keys", 0),
            0u);
  EXPECT_EQ(scenario_error(test::scenario_json(R"("num_blocks": 4)",
                                               R"([{"prompt": "a", "max_new_tokens": 1}])",
                                               R"(, "compare": {"x": {"kv_dtype": "int3"}})"))
                .rfind("s.json: compare.x.kv_dtype: expected a KV format", 0),
            0u);
}

TEST(ScenarioCompare, EvictionAndMlaResolve) {
  const Scenario s = parse_scenario_text(
      test::scenario_json(
          R"("num_blocks": 64)", R"([{"prompt_tokens": [1, 5], "max_new_tokens": 1}])",
          R"(, "compare": {"h2o": {"token_eviction": {"policy": "h2o", "budget": 64, "recent": 16}},
              "sinks": {"token_eviction": {"policy": "sinks", "budget": 64, "sinks": 4}},
              "mla": {"mla": {"rank": 16, "mode": "expanded"}}})"),
      "s.json");
  EXPECT_EQ(s.variant("h2o").token_eviction.policy.kind, EvictionKind::kH2O);
  EXPECT_EQ(s.variant("h2o").token_eviction.policy.budget, 64);
  EXPECT_EQ(s.variant("h2o").token_eviction.policy.recent, 16);
  EXPECT_EQ(s.variant("sinks").token_eviction.policy.sinks, 4);
  ASSERT_TRUE(s.variant("mla").mla.has_value());
  EXPECT_EQ(s.variant("mla").mla->rank, 16);
  EXPECT_EQ(s.variant("mla").mla->mode, MlaMode::kReconstruct);
  const ModelConfig& shape = test::real_model().model->config();
  EXPECT_NO_THROW(resolve_scenario(s, "base", shape, nullptr));
  auto error = [&](const std::string& v) -> std::string {
    try {
      resolve_scenario(s, v, shape, nullptr);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  // Token eviction resolves into the Simulator's config.
  const SimConfig h2o = resolve_scenario(s, "h2o", shape, nullptr).config;
  EXPECT_EQ(h2o.token_eviction.policy.kind, EvictionKind::kH2O);
  EXPECT_EQ(h2o.token_eviction.policy.budget, 64);
  EXPECT_EQ(error("h2o"), "");
  // MLA resolves: the codec is attached from the weights afterwards (none here: bookkeeping).
  ResolvedRun mla = resolve_scenario(s, "mla", shape, nullptr);
  ASSERT_TRUE(mla.mla.has_value());
  EXPECT_EQ(mla.mla->rank, 16);
  try {
    attach_mla(mla, nullptr, "s.json");
    ADD_FAILURE() << "MLA without weights must be an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "s.json: cache.mla: expected a model with weights to factorize (not bookkeeping "
              "only), got rank 16 on a shape without weights");
  }
  attach_mla(mla, test::real_model().model, "s.json");
  ASSERT_NE(mla.config.mla, nullptr);
  EXPECT_EQ(mla.config.mla->rank(), 16);
  EXPECT_EQ(scenario_error(
                test::scenario_json(R"("num_blocks": 4, "token_eviction": {"policy": "h2o"})")),
            "s.json: cache.token_eviction.budget: expected an integer >= 2 (live tokens kept per "
            "sequence), got nothing (missing)");
  EXPECT_EQ(
      scenario_error(test::scenario_json(
                         R"("num_blocks": 4, "token_eviction": {"policy": "h20", "budget": 8})"))
          .rfind("s.json: cache.token_eviction.policy: expected an eviction policy", 0),
      0u);
  EXPECT_EQ(scenario_error(test::scenario_json(R"("num_blocks": 4, "mla": {"rank": 0})")),
            "s.json: cache.mla.rank: expected an integer in [1, 65536], got 0");
}

}  // namespace
}  // namespace kvscope

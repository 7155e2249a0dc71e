// The scenario parser: every field, and one precise error per kind of mistake.
#include <gtest/gtest.h>

#include "engine/common/error.h"
#include "engine/scenario/scenario.h"
#include "tests/scenario/scenario_test_support.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

using test::scenario_error;

constexpr const char* kGood = R"({
  "format_version": 1, "title": "t", "description": "d",
  "cache": {"block_size": 8, "num_blocks": 40, "allocator": "contiguous",
  "preemption": "swap", "victim": "longest", "host_blocks": 5, "max_seq_len": 128},
  "scheduler": {"max_tokens_per_step": 32},
  "workload": {"requests": [{"arrival_step": 2, "prompt": "Once upon a time", "max_new_tokens": 10},
               {"prompt_tokens": [1, 5, 9], "max_new_tokens": 3, "priority": 2}]},
  "steps": 77,
  "captions": [{"step": 0, "caption": "start"}, {"step": 5, "caption": "later"}]})";

TEST(Scenario, ParsesEveryField) {
  const Scenario s = parse_scenario_text(kGood, "s.json");
  EXPECT_EQ(s.title, "t");
  EXPECT_EQ(s.description, "d");
  const SimConfig& c = s.cache.sim;
  EXPECT_EQ(c.block_size, 8);
  EXPECT_EQ(c.num_blocks, 40);
  EXPECT_EQ(c.allocator, AllocatorKind::kContiguous);
  EXPECT_EQ(c.preemption, PreemptionMode::kSwap);
  EXPECT_EQ(c.victim, VictimPolicy::kLongest);
  EXPECT_EQ(c.host_blocks, 5);
  EXPECT_EQ(c.max_seq_len, 128);
  EXPECT_EQ(s.max_tokens_per_step, 32);
  EXPECT_EQ(s.steps, 77);
  ASSERT_EQ(s.captions.size(), 2u);
  EXPECT_EQ(s.captions[1].step, 5);
  EXPECT_EQ(s.captions[1].text, "later");
  ASSERT_EQ(s.workload.requests.size(), 2u);
  EXPECT_EQ(s.workload.requests[0].arrival_step, 2);
  EXPECT_EQ(*s.workload.requests[0].prompt.text, "Once upon a time");
  EXPECT_EQ(s.workload.requests[1].prompt.tokens, (std::vector<int>{1, 5, 9}));
  const auto& m = test::real_model();
  const ResolvedRun run = resolve_scenario(s, "", m.model->config(), m.tokenizer.get());
  EXPECT_EQ(run.config.title, "t");
  EXPECT_EQ(run.config.max_tokens_per_step, 32);
  ASSERT_EQ(run.requests.size(), 2u);
  EXPECT_EQ(run.requests[0].prompt_tokens, m.tokenizer->encode("Once upon a time", true, false));
  EXPECT_EQ(run.requests[1].priority, 2);
}

TEST(Scenario, PoolBytesBecomesBlocks) {
  const Scenario s = parse_scenario_text(
      test::scenario_json(R"("block_size": 16, "pool_bytes": 1000000)"), "s.json");
  const ModelConfig& shape = test::real_model().model->config();
  const SimConfig c = resolve_scenario(s, "base", shape, nullptr).config;
  const long block_bytes = 2L * shape.n_layers * shape.n_kv_heads * shape.head_dim() * 4 * 16;
  EXPECT_EQ(c.num_blocks, 1000000 / block_bytes);
}

TEST(Scenario, ErrorsNameFilePathValueAndExpectation) {
  EXPECT_EQ(
      scenario_error(R"({"format_version": 1, "cache": {"num_blocks": 4},
      "workload": {"requests": [{"prompt": "a", "max_new_tokens": 1}]}, "extra": 1})"),
      "s.json: extra: expected one of the keys $schema, cache, captions, compare, description, "
      "format_version, model, sampler, scheduler, steps, title, workload, got unknown key "
      "\"extra\"");
  EXPECT_EQ(scenario_error(test::scenario_json(R"("num_blocks": 4, "blok_size": 3)"))
                .rfind("s.json: cache.blok_size: expected one of the keys", 0),
            0u);
  EXPECT_NE(scenario_error(test::scenario_json(R"("num_blocks": 4, "blok_size": 3)"))
                .find("got unknown key \"blok_size\" (did you mean \"block_size\"?)"),
            std::string::npos);
  EXPECT_EQ(scenario_error(test::scenario_json(
                R"("num_blocks": 4)", R"([{"prompt_tokens": [1, -4], "max_new_tokens": 1}])")),
            "s.json: workload.requests[0].prompt_tokens[1]: expected an integer in [0, "
            "1073741824], got -4");
  EXPECT_EQ(scenario_error(test::scenario_json(R"("num_blocks": 4, "allocator": "buddy")")),
            "s.json: cache.allocator: expected \"paged\" or \"contiguous\", got \"buddy\"");
  EXPECT_EQ(scenario_error(test::scenario_json(R"("num_blocks": 4, "victim": "oldest")"))
                .rfind("s.json: cache.victim: expected \"last_admitted\"", 0),
            0u);
  EXPECT_EQ(
      scenario_error(test::scenario_json(
          R"("num_blocks": 4)", R"([{"prompt": "a", "prompt_tokens": [1], "max_new_tokens": 1}])")),
      "s.json: workload.requests[0]: expected exactly one of \"prompt\" (text or "
      "{\"prefix\", \"suffix\"}) or \"prompt_tokens\" (ids), got both");
  EXPECT_EQ(scenario_error(test::scenario_json(R"("num_blocks": 4)", R"([{"prompt": "a"}])")),
            "s.json: workload.requests[0].max_new_tokens: expected an integer >= 1, got nothing "
            "(missing)");
  EXPECT_EQ(scenario_error(test::scenario_json(R"("num_blocks": 4, "pool_bytes": 9)")),
            "s.json: cache: expected exactly one of \"num_blocks\", \"pool_bytes\" or "
            "\"pool_tokens\", got 2 of them");
  EXPECT_EQ(scenario_error(test::scenario_json(R"("num_blocks": "many")")),
            "s.json: cache.num_blocks: expected an integer in [1, 50000000], got \"many\"");
  EXPECT_EQ(scenario_error(test::scenario_json(R"("num_blocks": 4)", "[]")),
            "s.json: workload.requests: expected a non-empty array of requests, got []");
  EXPECT_EQ(scenario_error(R"({"cache": {"num_blocks": 4}, "workload": {}})"),
            "s.json: format_version: expected 1, got nothing (missing)");
  EXPECT_EQ(scenario_error(R"({"format_version": 2, "cache": {"num_blocks": 4}, "workload": {}})"),
            "s.json: format_version: expected an integer in [1, 1], got 2");
  EXPECT_EQ(scenario_error(R"({"format_version": 1, "cache": {"num_blocks": 4}, "workload": {}})"),
            "s.json: workload: expected at least one of \"requests\", \"generators\" or "
            "\"trace\", got none");
  EXPECT_EQ(scenario_error("{\"cache\": ").rfind("s.json: byte ", 0), 0u);
  EXPECT_NE(scenario_error("{\"cache\": ").find("expected valid JSON"), std::string::npos);
}

TEST(Scenario, CaptionsStepsAndModel) {
  const std::string base = R"({"format_version": 1, "cache": {"num_blocks": 4},
      "workload": {"requests": [{"prompt": "a", "max_new_tokens": 1}]}, )";
  EXPECT_EQ(scenario_error(base + R"("captions": [{"step": 5, "caption": "a"},
      {"step": 2, "caption": "b"}]})"),
            "s.json: captions[1].step: expected steps in ascending order (at least 5), got 2");
  EXPECT_EQ(
      scenario_error(base + R"("captions": [{"step": 1, "text": "a"}]})"),
      "s.json: captions[0].text: expected one of the keys caption, step, view, got unknown key "
      "\"text\"");
  // A caption's view names variants of the file: "base" or one under "compare".
  const Scenario v = parse_scenario_text(base + R"("captions": [{"step": 0, "caption": "a",
      "view": {"variant": "int8", "compare": "base"}}], "compare": {"int8": {"kv_dtype": "int8"}}})",
                                         "s.json");
  EXPECT_EQ(v.captions[0].view.variant, "int8");
  EXPECT_EQ(v.captions[0].view.compare, "base");
  EXPECT_EQ(scenario_error(base + R"("captions": [{"step": 0, "caption": "a",
      "view": {"compare": "int9"}}], "compare": {"int8": {"kv_dtype": "int8"}}})"),
            "s.json: captions[0].view.compare: expected a variant of this scenario (base, int8), "
            "got \"int9\" (did you mean \"int8\"?)");
  EXPECT_EQ(scenario_error(base + R"("captions": [{"step": 0, "caption": "a",
      "view": {"compare_tab": "plots"}}]})"),
            "s.json: captions[0].view.compare_tab: expected memory or text, got \"plots\"");
  EXPECT_EQ(scenario_error(base + R"("captions": [{"step": 0, "caption": "a",
      "view": {"variant": "paged"}}]})"),
            "s.json: captions[0].view.variant: expected a variant of this scenario (base), got "
            "\"paged\"");
  EXPECT_EQ(scenario_error(base + R"("steps": 0})"),
            "s.json: steps: expected an integer in [1, 1073741824], got 0");
  EXPECT_EQ(scenario_error(base + R"("model": {"synthetic": "llama-9"}})")
                .rfind("s.json: model.synthetic (", 0),
            0u);
  EXPECT_EQ(scenario_error(base + R"("model": {"path": "a.bin", "synthetic": "llama-3-8b"}})"),
            "s.json: model: expected at most one of \"path\" or \"synthetic\", got both");
  const Scenario s = parse_scenario_text(
      base + R"("model": {"synthetic": "llama-3-70b", "bookkeeping": true}})", "s.json");
  EXPECT_EQ(s.model.arg, "synthetic:llama-3-70b");
  EXPECT_TRUE(s.model.bookkeeping);
  const ScenarioModelLoad m = load_scenario_model(s, "", false);
  EXPECT_EQ(m.weights, nullptr) << "bookkeeping: no 140 GB of random weights";
  EXPECT_TRUE(m.random_weights);
  EXPECT_EQ(m.shape.n_layers, 80);
}

}  // namespace
}  // namespace kvscope

namespace kvscope {
namespace {

// A caption's view: what a presenter's PageDown sets (workspace, attention layer and head, sink
// grid, pause), checked against the model's shape when the run is resolved.
constexpr const char* kCaptionViews = R"({
  "format_version": 1, "cache": {"num_blocks": 8},
  "workload": {"requests": [{"prompt": "Once", "max_new_tokens": 4}]},
  "captions": [{"step": 0, "caption": "a"},
               {"step": 2, "caption": "b", "view": {"workspace": "attention", "layer": 3,
                "head": 1, "sink_grid": true, "pause": true}}]})";

TEST(Scenario, CaptionViewsAreParsedAndCheckedAgainstTheModel) {
  const Scenario s = parse_scenario_text(kCaptionViews, "s.json");
  ASSERT_EQ(s.captions.size(), 2u);
  EXPECT_FALSE(s.captions[0].view.workspace.has_value());
  EXPECT_FALSE(s.captions[0].view.pause);
  const CaptionView& v = s.captions[1].view;
  EXPECT_EQ(v.workspace, "attention");
  EXPECT_EQ(v.layer, 3);
  EXPECT_EQ(v.head, 1);
  EXPECT_EQ(v.sink_grid, true);
  EXPECT_TRUE(v.pause);
  const auto& m = test::real_model();  // stories260K: 5 layers, 8 heads
  EXPECT_NO_THROW(resolve_scenario(s, "", m.model->config(), m.tokenizer.get()));
  std::string text = kCaptionViews;
  text.replace(text.find("\"layer\": 3"), 10, "\"layer\": 9");
  const Scenario past = parse_scenario_text(text, "s.json");
  try {
    resolve_scenario(past, "", m.model->config(), m.tokenizer.get());
    ADD_FAILURE() << "a layer past the model's was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "s.json: captions[1].view.layer: expected a layer of this model, 0 to 4, got 9");
  }
  std::string bad = kCaptionViews;
  bad.replace(bad.find("\"attention\""), 11, "\"sinks\"");
  EXPECT_EQ(test::scenario_error(bad),
            "s.json: captions[1].view.workspace: expected pool, prefix, attention, compare, live, "
            "kernel or serving, got \"sinks\"");
  bad = kCaptionViews;
  bad.replace(bad.find("\"pause\": true"), 13, "\"zoom\": 2");
  EXPECT_NE(test::scenario_error(bad).find("captions[1].view.zoom: expected one of the keys"),
            std::string::npos)
      << test::scenario_error(bad);
}

}  // namespace
}  // namespace kvscope

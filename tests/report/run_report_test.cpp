// The run report: files exist and are well formed after a real run of scenarios/minimal.json,
// report.json agrees with the Timeline, figures are right on hand-built metrics, and a failed
// write is a clear error that leaves no temporary file behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/analysis/pool_metrics.h"
#include "engine/common/error.h"
#include "engine/model/synthetic.h"
#include "engine/report/run_report.h"
#include "engine/scenario/scenario.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;

struct ScenarioRun {
  Scenario scenario;
  std::unique_ptr<Simulator> sim;
  RunReportInfo info;
};

ScenarioRun run_scenario(const std::string& name, int steps) {
  ScenarioRun r;
  const std::string path = std::string(KVSCOPE_SOURCE_DIR) + "/scenarios/" + name;
  r.scenario = parse_scenario(path);
  const auto& m = test::real_model();
  ResolvedRun run = resolve_scenario(r.scenario, "base", m.model->config(), m.tokenizer.get());
  r.sim = std::make_unique<Simulator>(run.config, SimModel{m.model->config(), m.model},
                                      std::move(run.requests));
  r.sim->run(steps);
  r.info.title = r.scenario.title;
  r.info.scenario_path = "scenarios/" + name;
  r.info.model_name = m.model->source();
  r.info.command = "kvscope run scenarios/" + name + " --steps " + std::to_string(steps);
  return r;
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = test::temp_path(name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

bool is_png(const std::string& path) {
  const std::vector<char> b = test::read_bytes(path);
  return b.size() > 8 && std::string(b.begin(), b.begin() + 8) == "\x89PNG\r\n\x1a\n";
}

int temp_files_in(const std::string& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    n += e.path().filename().string().find(".tmp.") != std::string::npos;
  return n;
}

TEST(RunReport, MinimalScenarioWritesWellFormedFilesThatAgreeWithTheTimeline) {
  ScenarioRun r = run_scenario("minimal.json", 60);
  const std::string dir = fresh_dir("report-minimal");
  std::vector<std::string> progress;
  const auto written = write_run_report(r.info, test::real_model().model->config(), *r.sim, dir,
                                        [&](const std::string& f) { progress.push_back(f); });
  EXPECT_EQ(written, progress);
  for (const char* f :
       {"utilization.png", "fragmentation.png", "free_blocks.png", "memory_vs_context.png"}) {
    EXPECT_TRUE(is_png(dir + "/" + f)) << f;
  }
  EXPECT_FALSE(fs::exists(dir + "/prefix_hit_rate.png"));  // prefix caching is off here
  EXPECT_EQ(temp_files_in(dir), 0);

  const nlohmann::json j = nlohmann::json::parse(test::read_text(dir + "/report.json"));
  const Timeline& t = *r.sim->timeline();
  const auto metrics = t.all_metrics();
  ASSERT_EQ(t.num_steps(), 60);
  ASSERT_EQ(j.at("steps").size(), metrics.size());
  for (std::size_t i = 0; i < metrics.size(); ++i) {
    const nlohmann::json& s = j["steps"][i];
    const StepMetrics& m = metrics[i];
    EXPECT_EQ(s.at("step").get<int>(), m.step);
    EXPECT_EQ(s.at("blocks_used").get<int>(), m.blocks_used);
    EXPECT_EQ(s.at("slots_filled").get<std::int64_t>(), m.slots_filled);
    EXPECT_EQ(s.at("internal_frag_slots").get<std::int64_t>(), m.internal_frag_slots);
    EXPECT_EQ(s.at("largest_free_run").get<int>(), m.largest_free_run);
    EXPECT_EQ(s.at("preemptions").get<std::int64_t>(), m.preemptions);
    EXPECT_EQ(s.at("kv_bytes_used").get<std::int64_t>(), m.kv_bytes_used);
    EXPECT_DOUBLE_EQ(s.at("utilization").get<double>(), m.utilization());
  }
  const RunSummary sum = summarize(metrics);
  const nlohmann::json& s = j.at("summary");
  EXPECT_EQ(s.at("steps").get<int>(), sum.steps);
  EXPECT_EQ(s.at("prefill_tokens").get<std::int64_t>(), sum.prefill_tokens);
  EXPECT_EQ(s.at("decode_tokens").get<std::int64_t>(), sum.decode_tokens);
  EXPECT_EQ(s.at("preemptions").get<std::int64_t>(), sum.preemptions);
  EXPECT_EQ(s.at("peak_blocks_used").get<int>(), sum.peak_blocks_used);
  EXPECT_EQ(s.at("finished").get<int>(), sum.finished);
  EXPECT_DOUBLE_EQ(s.at("mean_slot_utilization").get<double>(), sum.mean_utilization);
  EXPECT_EQ(s.at("requests").get<int>(), r.sim->num_requests());
  EXPECT_EQ(j.at("requests").size(), static_cast<std::size_t>(r.sim->num_requests()));
  EXPECT_EQ(j.at("config").at("block_size").get<int>(), 16);
  EXPECT_EQ(j.at("memory").at("kv_bytes_per_token").get<double>(), t.header().kv_bytes_per_token);
  EXPECT_EQ(j.at("title").get<std::string>(), r.scenario.title);
  EXPECT_EQ(j.at("plots").size(), 4u);

  const std::string md = test::read_text(dir + "/report.md");
  EXPECT_NE(md.find("# " + r.scenario.title), std::string::npos);
  for (const char* link :
       {"](utilization.png)", "](fragmentation.png)", "](free_blocks.png)",
        "](memory_vs_context.png)", "GiB", "10^9 bytes", "## What happened", "## Key figures"}) {
    EXPECT_NE(md.find(link), std::string::npos) << link;
  }
  // The plain-words summary states the run's own preemption count.
  EXPECT_NE(md.find("| preemptions (tokens recomputed) | " + std::to_string(sum.preemptions)),
            std::string::npos);
}

TEST(RunReport, PrefixCachingRunPlotsTheHitRate) {
  ScenarioRun r = run_scenario("shared-system-prompt.json", 40);
  const std::string dir = fresh_dir("report-prefix");
  write_run_report(r.info, test::real_model().model->config(), *r.sim, dir, {});
  EXPECT_TRUE(is_png(dir + "/prefix_hit_rate.png"));
  const nlohmann::json j = nlohmann::json::parse(test::read_text(dir + "/report.json"));
  const StepMetrics& last = r.sim->timeline()->metrics(39);
  EXPECT_GT(last.prefix_hit_tokens, 0);
  EXPECT_EQ(j["summary"]["prefix_hit_tokens"].get<std::int64_t>(), last.prefix_hit_tokens);
  EXPECT_EQ(j["summary"]["prompt_tokens"].get<std::int64_t>(), last.prompt_tokens);
  EXPECT_TRUE(j["summary"].contains("prefix_cache"));
  EXPECT_EQ(j.at("plots").size(), 5u);
}

StepMetrics step(int s, int used, std::int64_t filled, int free_run) {
  StepMetrics m;
  m.step = s;
  m.blocks_total = 10;
  m.blocks_used = used;
  m.free_blocks = 10 - used;
  m.slots_allocated = used * 16;
  m.slots_filled = filled;
  m.internal_frag_slots = used * 16 - filled;
  m.largest_free_run = free_run;
  return m;
}

TEST(RunReport, FiguresOnHandBuiltMetrics) {
  // Step 1: 5 of 10 blocks hold 70 tokens (80 slots); step 2: 8 blocks hold 125 tokens (128).
  const std::vector<StepMetrics> m = {step(0, 0, 0, 10), step(1, 5, 70, 3), step(2, 8, 125, 2)};
  const RunFigures f = run_figures(m, 16);
  EXPECT_EQ(f.peak_step, 2);
  EXPECT_EQ(f.peak_blocks_used, 8);
  EXPECT_DOUBLE_EQ(f.peak_block_occupancy, 0.8);
  EXPECT_DOUBLE_EQ(f.mean_block_occupancy, (0.0 + 0.5 + 0.8) / 3);
  EXPECT_DOUBLE_EQ(f.peak_token_occupancy, 125.0 / 160);
  EXPECT_DOUBLE_EQ(f.mean_token_occupancy, (0.0 + 70.0 / 160 + 125.0 / 160) / 3);
  EXPECT_DOUBLE_EQ(f.mean_slot_utilization, (70.0 / 80 + 125.0 / 128) / 2);  // step 0 has no slots
  EXPECT_DOUBLE_EQ(f.min_slot_utilization, 70.0 / 80);
  EXPECT_EQ(f.peak_internal_frag_slots, 10);
  EXPECT_DOUBLE_EQ(f.mean_internal_frag_slots, (0 + 10 + 3) / 3.0);
  EXPECT_EQ(f.min_largest_free_run, 2);
  EXPECT_EQ(f.min_largest_free_run_step, 2);
  EXPECT_EQ(f.final_largest_free_run, 2);
  EXPECT_THROW(run_figures({}, 16), Error);
  EXPECT_THROW(run_figures(m, 0), Error);
}

TEST(RunReport, UnwritableDirectoryIsAClearErrorAndLeavesNoPartialFile) {
  ScenarioRun r = run_scenario("minimal.json", 5);
  const ModelConfig& shape = test::real_model().model->config();
  const std::string missing = test::temp_path("report-missing-dir") + "/nope";
  fs::remove_all(fs::path(missing).parent_path());
  try {
    write_run_report(r.info, shape, *r.sim, missing, {});
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), missing + "/utilization.png");
    EXPECT_NE(e.detail().find("cannot write"), std::string::npos) << e.detail();
  }
  EXPECT_FALSE(fs::exists(missing));
  // report.md cannot be renamed over a directory: the earlier files are complete, the failed one
  // names itself, and no temporary file is left.
  const std::string dir = fresh_dir("report-blocked");
  fs::create_directories(dir + "/report.md/inside");
  try {
    write_run_report(r.info, shape, *r.sim, dir, {});
    ADD_FAILURE() << "renamed over a directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), dir + "/report.md");
  }
  EXPECT_EQ(temp_files_in(dir), 0);
  EXPECT_NO_THROW(nlohmann::json::parse(test::read_text(dir + "/report.json")));
}

// A random-weight shape (bookkeeping only) is labelled as such and gets the memory wall.
TEST(RunReport, RandomWeightShapeIsLabelledAndShowsTheMemoryWall) {
  const ModelConfig shape = parse_synthetic_spec("llama-3-8b,layers=2,vocab=512").config;
  SimConfig config;
  config.block_size = 16;
  config.num_blocks = 8;
  SimRequest req;
  req.prompt_tokens = {1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  req.max_new_tokens = 30;
  Simulator sim(config, SimModel{shape, nullptr}, {req});
  sim.run(100);
  RunReportInfo info;
  info.title = "random";
  info.scenario_path = "mem.json";
  info.model_name = "synthetic:llama-3-8b,layers=2,vocab=512 (random weights)";
  info.random_weights = true;
  info.bookkeeping_only = true;
  const std::string dir = fresh_dir("report-random");
  write_run_report(info, shape, sim, dir, {});
  EXPECT_TRUE(is_png(dir + "/memwall.png"));
  const std::string md = test::read_text(dir + "/report.md");
  for (const char* text : {"**Random weights**", "**Bookkeeping only**", "## The memory wall",
                           "KV bytes per token (fp32): 2 x 2 layers x 8 KV heads x 128 head_dim x "
                           "4 B/element = 16,384 B"}) {
    EXPECT_NE(md.find(text), std::string::npos) << text;
  }
  const nlohmann::json j = nlohmann::json::parse(test::read_text(dir + "/report.json"));
  EXPECT_TRUE(j["model"]["random_weights"].get<bool>());
  EXPECT_EQ(j["summary"]["finished"].get<int>(), 1);
  EXPECT_EQ(j["requests"][0]["generated"].get<int>(), 30);
  EXPECT_EQ(j["memory"]["kv_bytes_per_token"].get<double>(), 2.0 * 2 * 8 * 128 * 4);  // fp32 pool
}

}  // namespace
}  // namespace kvscope

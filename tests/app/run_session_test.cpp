// RunSession: real scenarios run on the worker thread, recordings round-trip, bad files throw
// naming the file, stop() never hangs, and a restart reproduces the same timeline.
#include "app/core/run_session.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "engine/common/error.h"
#include "engine/kv/kv_format.h"

namespace kvscope::ui {
namespace {

std::string scenario(const char* name) {
  return std::string(KVSCOPE_SOURCE_DIR) + "/scenarios/" + name;
}

std::filesystem::path temp_dir() {
  const auto dir = std::filesystem::temp_directory_path() / "kvscope_run_session_test";
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(RunSession, RunsTheMinimalScenarioOnTheRealModel) {
  std::unique_ptr<RunSession> run = RunSession::open(scenario("minimal.json"));
  ASSERT_GE(run->timeline()->num_steps(), 1) << "the first step runs before open returns";
  EXPECT_NE(run->tokenizer(), nullptr);
  run->wait();
  EXPECT_FALSE(run->is_running());
  EXPECT_FALSE(run->take_error().has_value());
  const Timeline& t = *run->timeline();
  EXPECT_GT(t.num_steps(), 100);
  EXPECT_EQ(t.all_metrics().back().requests_finished, 4);
  EXPECT_FALSE(t.header().random_weights);
  EXPECT_EQ(t.header().allocator, "paged");
}

TEST(RunSession, RestartIsDeterministic) {
  std::unique_ptr<RunSession> a = RunSession::open(scenario("minimal.json"));
  std::unique_ptr<RunSession> b = RunSession::open(scenario("minimal.json"));
  a->wait();
  b->wait();
  const auto ma = a->timeline()->all_metrics(), mb = b->timeline()->all_metrics();
  ASSERT_EQ(ma.size(), mb.size());
  for (std::size_t i = 0; i < ma.size(); ++i) {
    EXPECT_EQ(ma[i].blocks_used, mb[i].blocks_used) << "step " << i;
    EXPECT_EQ(ma[i].slots_filled, mb[i].slots_filled) << "step " << i;
  }
  ASSERT_EQ(a->timeline()->num_events(), b->timeline()->num_events());
}

TEST(RunSession, StopEndsTheWorkerAndKeepsTheTimelineReadable) {
  std::unique_ptr<RunSession> run = RunSession::open(scenario("mixed-lengths.json"));
  run->stop();
  EXPECT_FALSE(run->is_running());
  const int n = run->timeline()->num_steps();
  ASSERT_GE(n, 1);
  PoolState state;
  run->timeline()->state_at(n - 1, state);
  EXPECT_EQ(state.step, n - 1);
  run->stop();  // idempotent
}

TEST(RunSession, RecordingRoundTrips) {
  std::unique_ptr<RunSession> run = RunSession::open(scenario("minimal.json"), true);
  run->wait();
  const std::string path = (temp_dir() / "minimal.kvr").string();
  run->timeline()->save(path);
  std::unique_ptr<RunSession> loaded = RunSession::open(path);
  EXPECT_FALSE(loaded->is_scenario());
  EXPECT_FALSE(loaded->is_running());
  EXPECT_EQ(loaded->timeline()->num_steps(), run->timeline()->num_steps());
  EXPECT_EQ(loaded->timeline()->header().title, run->timeline()->header().title);
}

TEST(RunSession, BadFilesThrowNamingTheFileAndPath) {
  const std::string bad = (temp_dir() / "bad.json").string();
  std::ofstream(bad) << R"({"format_version": 1, "title": "x",
                          "cache": {"block_size": -4, "num_blocks": 8},
                          "workload": {"requests": [{"prompt": "hi", "max_new_tokens": 4}]}})";
  try {
    RunSession::open(bad);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("block_size"), std::string::npos) << e.what();
  }
  EXPECT_THROW(RunSession::open((temp_dir() / "missing.kvr").string()), Error);
}

// The scenario at `path` run to the end twice: on the CPU and on the CUDA backend's emulated
// device (Controls > backend), neither with an error.
std::pair<std::unique_ptr<RunSession>, std::unique_ptr<RunSession>> run_on_cpu_and_cuda_sim(
    const std::string& path) {
  std::unique_ptr<RunSession> cpu = RunSession::open(path);
  PolicyOverride emulated;
  emulated.backend = "cuda-sim";
  std::unique_ptr<RunSession> sim = RunSession::open(path, false, emulated);
  cpu->wait();
  sim->wait();
  EXPECT_FALSE(cpu->take_error().has_value());
  EXPECT_FALSE(sim->take_error().has_value());
  return {std::move(cpu), std::move(sim)};
}

// Each request's decoded tokens, in order (DecodeToken events: b = the token id).
std::map<std::int32_t, std::vector<std::int64_t>> decoded(const Timeline& t) {
  std::map<std::int32_t, std::vector<std::int64_t>> out;
  for (const Event& e : t.events())
    if (e.type == EventType::kDecodeToken) out[e.request].push_back(e.b);
  return out;
}

// The Controls panel's backend choice (and kvscope-ui --backend): the same scenario on the CUDA
// backend's kernels on the emulated device decodes the CPU's tokens, with swap preemption and
// prefix caching.
TEST(RunSession, TheCudaBackendOnTheEmulatedDeviceDecodesTheCpusTokens) {
  const std::string path = (temp_dir() / "two_stories.json").string();
  std::ofstream(path) << R"({"format_version": 1, "title": "two stories",
      "cache": {"block_size": 4, "num_blocks": 14, "preemption": "swap", "host_blocks": 14,
                "prefix_caching": true},
      "workload": {"requests": [{"prompt": "Once upon a time", "max_new_tokens": 40},
                                {"prompt": "Once upon a time, Tom", "max_new_tokens": 36,
                                 "arrival_step": 2}]}})";
  const auto [cpu, sim] = run_on_cpu_and_cuda_sim(path);
  EXPECT_EQ(cpu->run_info()->backend_name, "CPU");
  EXPECT_EQ(sim->run_info()->backend_name, "cuda-sim");
  EXPECT_EQ(sim->run_info()->override.describe(), "backend cuda-sim");
  const auto want = decoded(*cpu->timeline());
  ASSERT_EQ(want.size(), 2u);
  EXPECT_EQ(decoded(*sim->timeline()), want);
  int swaps = 0, hits = 0;
  for (const Event& e : sim->timeline()->events()) {
    swaps += e.type == EventType::kSwappedIn;
    hits += e.type == EventType::kPrefixLookup && e.a > 0;
  }
  EXPECT_GT(swaps, 0) << "the pool is tight: blocks went to the host tier and came back";
  EXPECT_GT(hits, 0) << "the second prompt's first block is served from the prefix cache";
}

// A scenario file of two short stories (the second arriving at step 3) with this "cache" object.
std::string two_stories(const std::string& name, const std::string& cache) {
  const std::string path = (temp_dir() / (name + ".json")).string();
  std::ofstream(path) << R"({"format_version": 1, "title": ")" << name << R"(", "cache": )" << cache
                      << R"(,
      "workload": {"requests": [{"prompt": "Once upon a time", "max_new_tokens": 40},
                                {"prompt": "Lily and Ben", "max_new_tokens": 30,
                                 "arrival_step": 3}]}})";
  return path;
}

// The two-request scenario at `path` run on the CPU and on the emulated device, whose first 20
// tokens of each request must be the CPU's (the UI's device GEMMs use fp16 weights, so after a
// few dozen tokens a near tie may go the other way). Returns the device's session.
std::unique_ptr<RunSession> expect_the_cpus_first_tokens(const std::string& path) {
  auto [cpu, sim] = run_on_cpu_and_cuda_sim(path);
  EXPECT_EQ(sim->run_info()->backend_name, "cuda-sim");
  const auto want = decoded(*cpu->timeline()), got = decoded(*sim->timeline());
  EXPECT_EQ(want.size(), 2u);
  EXPECT_EQ(got.size(), 2u);
  const std::size_t n = 20;
  for (const auto& [request, tokens] : want) {
    const auto it = got.find(request);
    if (it == got.end() || it->second.size() < n || tokens.size() < n) {
      ADD_FAILURE() << "request " << request << ": fewer than " << n << " tokens decoded";
      continue;
    }
    EXPECT_EQ(std::vector(it->second.begin(), it->second.begin() + n),
              std::vector(tokens.begin(), tokens.begin() + n))
        << "request " << request << ": the first " << n << " tokens";
  }
  return std::move(sim);
}

// KIVI in the UI's session on the emulated device (open groups kept there, quantized there when
// they fill, past the first group of 32): the CPU's first tokens.
TEST(RunSession, KiviRunsOnTheEmulatedDeviceInTheUisSession) {
  expect_the_cpus_first_tokens(
      two_stories("kivi", R"({"block_size": 16, "num_blocks": 40, "kv_dtype": "kivi2"})"));
}

// Token eviction in the UI's session on the emulated device: the run completes, evicting and
// compacting in the device's pool, with the CPU's first tokens (token equality with fp32 weights
// is CudaSimBackend.TokenEvictionOnTheDeviceGivesTheCpusTokens).
TEST(RunSession, TokenEvictionRunsOnTheEmulatedDeviceInTheUisSession) {
  const std::unique_ptr<RunSession> sim = expect_the_cpus_first_tokens(
      two_stories("evicting", R"({"block_size": 4, "num_blocks": 40, "kv_dtype": "int8",
                "token_eviction": {"policy": "h2o", "budget": 12, "recent": 4,
                                   "compaction": "always", "positions": "shift"}})"));
  int evicted = 0, moved = 0;
  for (const Event& e : sim->timeline()->events()) {
    evicted += e.type == EventType::kTokensEvicted;
    moved += e.type == EventType::kSlotMoved;
  }
  EXPECT_GT(evicted, 0) << "the budget (12) is far below each sequence's length";
  EXPECT_GT(moved, 0) << "compaction moved slots in the device's pool";
}

}  // namespace
}  // namespace kvscope::ui

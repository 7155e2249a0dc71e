// A step's attention launch timed through the CUDA backend (kernels/backend/attention_timing.h),
// on the emulated device and stories260K: the shape it records is the one the emulator's trace
// of the same step reads (contexts, heads, formats), its distinct K/V bytes are the trace's
// count, timing changes no token of the run, and kernel_timing.json round-trips and refuses what
// is not in its format with the field named.
#include <gtest/gtest.h>

#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/common/error.h"
#include "engine/scenario/scenario.h"
#include "kernels/backend/attention_timing.h"
#include "kernels/backend/cuda_backend.h"
#include "kernels/backend/kernel_trace_run.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

std::unique_ptr<Simulator> cuda_sim_run(const std::string& name, const std::string& kv_format,
                                        int block_size = 0) {
  const Scenario s = parse_scenario(std::string(KVSCOPE_SOURCE_DIR) + "/scenarios/" + name);
  const auto& m = test::real_model();
  ResolvedRun run = resolve_scenario(s, "base", m.model->config(), m.tokenizer.get());
  run.config.k_format = run.config.v_format = parse_kv_format(kv_format, "test");
  if (block_size > 0) {
    const long tokens = static_cast<long>(run.config.num_blocks) * run.config.block_size;
    run.config.num_blocks = static_cast<int>((tokens + block_size - 1) / block_size);
    run.config.block_size = block_size;
  }
  run.config.make_backend = [] { return make_cuda_sim_backend(GemmType::kF32); };
  return std::make_unique<Simulator>(run.config, SimModel{m.model->config(), m.model},
                                     std::move(run.requests));
}

AttentionTiming timing_for(int layer) {
  AttentionTiming t;
  t.layer = layer;
  t.repeats = 1;
  t.rounds = 2;
  t.copy_bytes = 4096;
  return t;
}

TEST(AttentionTiming, RecordsTheShapeAndBytesTheEmulatorsTraceReads) {
  // A prefill step (step 0: two prompts' causal queries) and a decode step; the decode kernel's
  // format at the scenario's block size and a packed one (the paged kernel) at another.
  const std::pair<const char*, int> configs[] = {{"fp16", 16}, {"int4", 4}};
  for (const auto& [format, block] : configs) {
    for (int step : {0, 12}) {
      const std::string what = std::string(format) + ", block " + std::to_string(block) +
                               ", step " + std::to_string(step);
      auto timed = cuda_sim_run("kernel-coalescing.json", format, block);
      auto traced = cuda_sim_run("kernel-coalescing.json", format, block);
      timed->run(step);
      traced->run(step);
      AttentionTiming t = timing_for(3);
      {
        ScopedAttentionTiming on(t);
        ASSERT_TRUE(timed->step()) << what;
      }
      const StepKernelTrace trace = trace_next_step(*traced, 3, "test");
      ASSERT_TRUE(t.timed) << what;
      EXPECT_FALSE(t.per_query) << what;
      EXPECT_EQ(t.shape, launch_shape(trace)) << what;
      EXPECT_EQ(t.shape.k_format, format) << what;
      EXPECT_EQ(t.shape.block_size, block) << what;
      // Two ways of counting the same bytes: the slots of the queries' tables times the
      // format's bytes per slot, and the distinct bytes the emulator saw the kernel load.
      EXPECT_EQ(t.kv_bytes, trace.summary.kv_unique_bytes) << what;
      EXPECT_EQ(t.round_ms.size(), 2u) << what;
      for (double ms : t.round_ms) EXPECT_GT(ms, 0.0) << what;
      EXPECT_GT(t.copy_gb_per_s, 0.0) << what;
      const MeasuredLaunch m = measured_launch(t, step);
      EXPECT_EQ(m.step, step);
      EXPECT_LE(m.ms_min, m.ms);
    }
  }
}

TEST(AttentionTiming, TimingChangesNoTokenAndTimesOnlyItsLayer) {
  auto plain = cuda_sim_run("kernel-coalescing.json", "int8");
  auto timed = cuda_sim_run("kernel-coalescing.json", "int8");
  plain->run(24);
  for (int s = 0; s < 24; ++s) {
    AttentionTiming t = timing_for(s % 5);
    ScopedAttentionTiming on(t);
    ASSERT_TRUE(timed->step());
    ASSERT_TRUE(t.timed) << "step " << s;
  }
  for (int r = 0; r < plain->num_requests(); ++r)
    EXPECT_EQ(timed->request(r).tokens, plain->request(r).tokens) << "request " << r;
  // A layer the model lacks is never reached: nothing timed.
  AttentionTiming none = timing_for(99);
  {
    ScopedAttentionTiming on(none);
    ASSERT_TRUE(timed->step());
  }
  EXPECT_FALSE(none.timed);
  EXPECT_TRUE(none.round_ms.empty());
}

MeasuredLaunch launch(std::vector<int> contexts, double ms) {
  MeasuredLaunch m;
  m.shape = LaunchShape{"fp16", "fp16", 16, 8, 4, 8, std::move(contexts)};
  m.step = 3;
  m.kv_bytes = 4096;
  m.ms = ms;
  m.ms_min = ms / 2;
  m.repeats = 20;
  m.rounds = 7;
  return m;
}

TEST(KernelTimings, RoundTripsAndFindsTheSameShapeOnly) {
  KernelTimings t;
  t.device = "NVIDIA H200";
  t.date = "2026-11-29T19:36:09Z";
  t.commit = "abe0f2f";
  t.scenario = "kernel-coalescing.json";
  t.copy_gb_per_s = 2083.6;
  t.add(launch({5, 7}, 0.010));
  t.add(launch({5, 8}, 0.020));
  t.add(launch({5, 7}, 0.030));  // the same shape again: replaces the first
  ASSERT_EQ(t.launches.size(), 2u);
  std::ostringstream o;
  write_kernel_timings(o, t);
  const KernelTimings back = parse_kernel_timings(nlohmann::json::parse(o.str()), "f.json");
  EXPECT_EQ(back.device, t.device);
  EXPECT_FALSE(back.emulated);
  EXPECT_DOUBLE_EQ(back.copy_gb_per_s, t.copy_gb_per_s);
  ASSERT_EQ(back.launches.size(), 2u);
  const MeasuredLaunch* m = back.find(LaunchShape{"fp16", "fp16", 16, 8, 4, 8, {5, 7}});
  ASSERT_NE(m, nullptr);
  EXPECT_DOUBLE_EQ(m->ms, 0.030);
  EXPECT_DOUBLE_EQ(m->kv_gb_per_s(), 4096 / 0.030 / 1e6);
  EXPECT_EQ(back.find(LaunchShape{"fp16", "fp16", 16, 8, 4, 8, {7, 5}}), nullptr);  // order
  EXPECT_EQ(back.find(LaunchShape{"int8", "int8", 16, 8, 4, 8, {5, 7}}), nullptr);
  EXPECT_EQ(back.find(LaunchShape{"fp16", "fp16", 32, 8, 4, 8, {5, 7}}), nullptr);
}

std::string parse_error(const std::string& text) {
  try {
    parse_kernel_timings(nlohmann::json::parse(text), "t.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(KernelTimings, RefusesAFileNotInItsFormatNamingTheField) {
  KernelTimings t;
  t.device = "NVIDIA H200";
  t.add(launch({3}, 0.01));
  nlohmann::json good = kernel_timings_json(t);
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = good;
    edit(j);
    return parse_error(j.dump());
  };
  EXPECT_EQ(parse_error(good.dump()), "(no error)");
  EXPECT_EQ(with([](nlohmann::json& j) { j["kvscope_kernel_timings"] = 2; }),
            "t.json: kvscope_kernel_timings: expected format version 1, got 2");
  EXPECT_EQ(with([](nlohmann::json& j) { j.erase("device"); }),
            "t.json.device: missing (expected a string)");
  EXPECT_EQ(with([](nlohmann::json& j) { j["launches"][0]["ms"] = -1; }),
            "t.json: launches[0].ms: expected a number >= 0, got -1");
  EXPECT_EQ(with([](nlohmann::json& j) { j["launches"][0]["contexts"][0] = 0; }),
            "t.json: launches[0].contexts[0]: expected a slot count >= 1, got 0");
  EXPECT_EQ(with([](nlohmann::json& j) { j["launches"][0]["ms_min"] = 1.0; }),
            "t.json: launches[0].ms_min: expected at most ms (0.010000), got 1.000000");
  EXPECT_EQ(parse_error("[]"), "t.json: expected a JSON object (kernel timings), got array");
}

TEST(KernelTimings, TheShippedFileIsAGpusAndParses) {
  // assets/gpu/kernel-timings.json: what the Kernel panel states; measured by the GPU check.
  const KernelTimings t =
      load_kernel_timings(std::string(KVSCOPE_SOURCE_DIR) + "/assets/gpu/kernel-timings.json");
  EXPECT_FALSE(t.emulated);
  EXPECT_NE(t.device.find("NVIDIA"), std::string::npos) << t.device;
  EXPECT_GT(t.copy_gb_per_s, 100.0);
  ASSERT_FALSE(t.launches.empty());
  for (const MeasuredLaunch& m : t.launches) {
    ASSERT_GT(m.ms, 0.0);
    ASSERT_LE(m.ms_min, m.ms);
    ASSERT_FALSE(m.shape.contexts.empty());
  }
}

}  // namespace
}  // namespace kvscope

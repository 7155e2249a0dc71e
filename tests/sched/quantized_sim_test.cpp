// Multi-request runs with quantized KV formats: one byte budget holds proportionally more token
// slots for smaller formats (exact bytes, scales included), the Simulator runs the real model
// through those blocks with invariants intact, and the larger capacity shows as fewer
// preemptions and more tokens resident at once.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/kv/kv_storage.h"
#include "tests/sched/sim_test_support.h"

namespace kvscope {
namespace {

constexpr int kBlockSize = 8;
// The byte budget of the device pool: 16 fp32 blocks of 8 tokens for stories260K (160 KiB).
std::size_t budget_bytes() {
  const ModelConfig& c = test::real_model().model->config();
  return 16 * kv_layout_for(c, kBlockSize, 1, KvFormat{}, KvFormat{}).block_bytes();
}

struct RunSummary {
  int num_blocks = 0;
  std::int64_t preemptions = 0;
  std::int64_t peak_slots_filled = 0;
  int finished = 0;
};

RunSummary run_in_budget(const std::string& format_name) {
  const ModelConfig& c = test::real_model().model->config();
  const KvFormat f = parse_kv_format(format_name, "test");
  const std::size_t block_bytes = kv_layout_for(c, kBlockSize, 1, f, f).block_bytes();
  SimConfig config;
  config.block_size = kBlockSize;
  config.num_blocks = static_cast<int>(budget_bytes() / block_bytes);
  config.k_format = f;
  config.v_format = f;
  const auto requests = test::mixed_requests(10);
  Simulator sim(config, test::real_sim_model(), requests);
  test::run_checked(sim);  // invariants after every step
  RunSummary out;
  out.num_blocks = config.num_blocks;
  for (const StepMetrics& m : sim.timeline()->all_metrics()) {
    out.peak_slots_filled = std::max(out.peak_slots_filled, m.slots_filled);
    EXPECT_LE(static_cast<std::size_t>(m.kv_bytes_used), budget_bytes()) << format_name;
  }
  const StepMetrics& last = sim.timeline()->metrics(sim.timeline()->num_steps() - 1);
  out.preemptions = last.preemptions;
  out.finished = last.requests_finished;
  return out;
}

TEST(QuantizedSimulator, ByteBudgetHoldsProportionallyMoreTokens) {
  const ModelConfig& c = test::real_model().model->config();
  const double fp32_bytes =
      kv_layout_for(c, kBlockSize, 1, KvFormat{}, KvFormat{}).bytes_per_token();
  for (const char* name : {"fp16", "bf16", "fp8-e4m3", "int8", "int4", "int2"}) {
    SCOPED_TRACE(name);
    const KvFormat f = parse_kv_format(name, "test");
    const KvLayout layout = kv_layout_for(c, kBlockSize, 1, f, f);
    const int blocks = static_cast<int>(budget_bytes() / layout.block_bytes());
    // Blocks (hence token slots) scale with the inverse of the exact bytes per token.
    EXPECT_EQ(blocks, static_cast<int>(16 * fp32_bytes / layout.bytes_per_token()));
    EXPECT_GT(blocks, 16);
  }
}

// KIVI quantizes a key group when its last token is written: prefill chunks that cross a group
// (one batched step each) must still run every request to the end (Transformer::forward_step
// runs such steps in waves).
TEST(QuantizedSimulator, KiviPoolsRunChunkedPrefillAcrossKeyGroups) {
  for (const char* name : {"kivi2-r8", "kivi4-r8"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(run_in_budget(name).finished, 10);
  }
}

TEST(QuantizedSimulator, SmallerFormatsRunMoreTokensAtOnceInTheSameBudget) {
  const RunSummary fp32 = run_in_budget("fp32");
  const RunSummary fp16 = run_in_budget("fp16");
  const RunSummary int8 = run_in_budget("int8");
  const RunSummary int4 = run_in_budget("int4");
  for (const RunSummary* r : {&fp32, &fp16, &int8, &int4}) EXPECT_EQ(r->finished, 10);
  EXPECT_EQ(fp16.num_blocks, 2 * fp32.num_blocks);
  EXPECT_GT(int8.num_blocks, fp16.num_blocks);
  EXPECT_GT(int4.num_blocks, int8.num_blocks);
  // fp32 is too small for the workload: it preempts. Smaller formats preempt less and keep more
  // tokens resident at the peak.
  EXPECT_GT(fp32.preemptions, 0);
  EXPECT_LT(int8.preemptions, fp32.preemptions);
  EXPECT_LE(int4.preemptions, int8.preemptions);
  EXPECT_GT(fp16.peak_slots_filled, fp32.peak_slots_filled);
  EXPECT_GE(int8.peak_slots_filled, fp16.peak_slots_filled);
}

}  // namespace
}  // namespace kvscope

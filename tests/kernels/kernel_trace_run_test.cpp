// One engine step's attention launch traced through the Simulator on the emulated device
// (kernels/backend/kernel_trace_run.h), on stories260K: each query is named by the request whose
// block table it read, the bytes read are the queries' context rows, and tracing a step changes
// no token of the run.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/scenario/scenario.h"
#include "kernels/backend/cuda_backend.h"
#include "kernels/backend/kernel_trace_run.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

std::unique_ptr<Simulator> cuda_sim_run(const std::string& name, const std::string& kv_format,
                                        const std::string& variant = "base") {
  const Scenario s = parse_scenario(std::string(KVSCOPE_SOURCE_DIR) + "/scenarios/" + name);
  const auto& m = test::real_model();
  ResolvedRun run = resolve_scenario(s, variant, m.model->config(), m.tokenizer.get());
  if (!kv_format.empty())
    run.config.k_format = run.config.v_format = parse_kv_format(kv_format, "test");
  run.config.make_backend = [] { return make_cuda_sim_backend(GemmType::kF32); };
  return std::make_unique<Simulator>(run.config, SimModel{m.model->config(), m.model},
                                     std::move(run.requests));
}

std::vector<std::vector<int>> all_tokens(const Simulator& sim) {
  std::vector<std::vector<int>> out;
  for (int r = 0; r < sim.num_requests(); ++r) out.push_back(sim.request(r).tokens);
  return out;
}

TEST(KernelTraceRun, QueriesAreNamedByTheirRequestsAndReadTheirContexts) {
  for (const char* format : {"fp32", "int4"}) {
    auto sim = cuda_sim_run("minimal.json", format);
    sim->run(11);
    const StepKernelTrace t = trace_next_step(*sim, 2, "test");
    const std::string what = format;
    EXPECT_EQ(t.step, 11) << what;  // the recording's numbering: 11 steps ran before it
    EXPECT_EQ(t.layer, 2) << what;
    EXPECT_EQ(t.attention_launches, t.layers) << what;
    EXPECT_EQ(t.summary.kernel, std::string(format) == "fp32" ? "decode_split_batch_kernel"
                                                              : "paged_attention_batch_kernel")
        << what;
    ASSERT_FALSE(t.query_request.empty()) << what;
    // Each query's table, as the kernel was given it, is the start of its request's table.
    long context_rows = 0;
    std::vector<int> slots(t.query_request.size(), 0);
    for (const sim::ThreadBlockTrace& tb : t.summary.blocks) {
      ASSERT_TRUE(tb.role) << what;
      const int req = t.query_request[static_cast<std::size_t>(tb.role->query)];
      ASSERT_GE(req, 0) << what << " query " << tb.role->query;
      const auto table = std::find_if(t.block_tables.begin(), t.block_tables.end(),
                                      [&](const auto& x) { return x.request == req; });
      ASSERT_NE(table, t.block_tables.end()) << what;
      ASSERT_LE(tb.role->table.size(), table->blocks.size()) << what;
      EXPECT_TRUE(std::equal(tb.role->table.begin(), tb.role->table.end(), table->blocks.begin()))
          << what << " query " << tb.role->query;
      EXPECT_TRUE(tb.stray_blocks.empty()) << what;
      slots[static_cast<std::size_t>(tb.role->query)] = tb.role->num_slots;
      // Independently of the tables: a decode query attends over every token its request has
      // computed, this step's included (every query of step 11 decodes).
      EXPECT_EQ(tb.role->num_slots, sim->request(req).num_computed) << what;
    }
    for (int s : slots) context_rows += s;
    if (std::string(format) == "fp32") {
      // The decode kernels read each row once per KV head: K and V, 4 bytes a value.
      EXPECT_EQ(t.summary.kv.distinct_bytes, context_rows * t.kv_heads * t.head_dim * 4 * 2)
          << what;
    }
    // Every query is a different request (decode steps of the scenario's four).
    std::vector<int> reqs = t.query_request;
    std::sort(reqs.begin(), reqs.end());
    EXPECT_EQ(std::unique(reqs.begin(), reqs.end()), reqs.end()) << what;
  }
}

// The layer's KV write launches: each stores its request's new token into the block its table
// gives that slot, exactly the token's K and V bytes in the format, and (per KV head, one warp
// each) in the transactions counted here by hand.
TEST(KernelTraceRun, KvWritesStoreEachNewTokenIntoItsTablesBlock) {
  for (const char* format : {"fp16", "int8", "int4"}) {
    const std::string what = format;
    auto sim = cuda_sim_run("minimal.json", format);
    sim->run(11);
    const StepKernelTrace t = trace_next_step(*sim, 1, "test");
    const bool grouped = what == "int4";
    // Step 11: four decode queries, so four new tokens (int4: a launch per row, K then V).
    ASSERT_EQ(t.writes.size(), t.query_request.size() * (grouped ? 2 : 1)) << what;
    const int kv_dim = t.kv_heads * t.head_dim;
    long expected_total = 0;
    for (const StepKernelTrace::KvWrite& w : t.writes) {
      ASSERT_GE(w.request, 0) << what;
      // The token written is the one this step computes: its request's last slot.
      EXPECT_EQ(w.slot, sim->request(w.request).num_computed - 1) << what;
      const auto table = std::find_if(t.block_tables.begin(), t.block_tables.end(),
                                      [&](const auto& x) { return x.request == w.request; });
      ASSERT_NE(table, t.block_tables.end()) << what;
      ASSERT_LT(static_cast<std::size_t>(w.slot / t.block_size), table->blocks.size()) << what;
      EXPECT_EQ(w.kv_block, table->blocks[static_cast<std::size_t>(w.slot / t.block_size)])
          << what << " request " << w.request;
      long bytes = 0, sectors = 0;
      if (what == "fp16") {
        // K and V, 2 bytes a value; each KV head's 8 values are 16 bytes in one sector.
        EXPECT_EQ(w.rows, "K and V");
        bytes = 2L * kv_dim * 2;
        sectors = 2L * t.kv_heads;
      } else if (what == "int8") {
        // A byte a value and an fp16 scale per head: each head's codes one store (a sector),
        // its scale another.
        EXPECT_EQ(w.rows, "K and V");
        bytes = 2L * (kv_dim + 2L * t.kv_heads);
        sectors = 2L * 2 * t.kv_heads;
      } else {
        // One row: 4 bits a value and a group's fp16 scale and zero (groups of 32 here).
        bytes = kv_dim / 2 + 4L * (kv_dim / 32);
        sectors = 2;  // the codes' 16 bytes, the group's 4
      }
      EXPECT_EQ(w.stores.distinct_bytes, bytes) << what;
      EXPECT_EQ(w.stores.sectors, sectors) << what;
      EXPECT_EQ(w.stores.ideal_sectors, sectors) << what;
      expected_total += bytes;
    }
    if (grouped) {
      int k_rows = 0;
      for (const auto& w : t.writes) k_rows += w.rows == "K" ? 1 : 0;
      EXPECT_EQ(k_rows * 2, static_cast<int>(t.writes.size()));
    }
    EXPECT_EQ(t.write_total.distinct_bytes, expected_total) << what;
  }
}

TEST(KernelTraceRun, TracingAStepChangesNoToken) {
  auto plain = cuda_sim_run("minimal.json", "int8");
  plain->run(40);  // steps 1..40
  auto traced = cuda_sim_run("minimal.json", "int8");
  traced->run(5);
  trace_next_step(*traced, 0, "test");
  traced->run(40);  // up to step 40, as the plain run
  EXPECT_EQ(all_tokens(*traced), all_tokens(*plain));
}

TEST(KernelTraceRun, RefusesALayerOutsideTheModel) {
  auto sim = cuda_sim_run("minimal.json", "");
  try {
    trace_next_step(*sim, 5, "minimal.json");
    ADD_FAILURE() << "traced layer 5 of 5";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--layer: expected a layer in 0..4, got 5");
  }
}

TEST(KernelTraceRun, TheCpuBackendRunsNoKernelToTraceNorDoesAFinishedRun) {
  const Scenario s = parse_scenario(std::string(KVSCOPE_SOURCE_DIR) + "/scenarios/minimal.json");
  const auto& m = test::real_model();
  ResolvedRun run = resolve_scenario(s, "base", m.model->config(), m.tokenizer.get());
  Simulator sim(run.config, SimModel{m.model->config(), m.model}, std::move(run.requests));
  try {
    trace_next_step(sim, 0, "minimal.json");
    ADD_FAILURE() << "traced the CPU backend";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step 0 ran no attention kernel on the emulated device"),
              std::string::npos)
        << e.what();
  }
  sim.run(100000);  // (on the CPU: quicker to the end)
  try {
    trace_next_step(sim, 0, "minimal.json");
    ADD_FAILURE() << "traced a finished run";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "minimal.json: the run has finished: there is no step to trace");
  }
}

// scenarios/kernel-coalescing.json's captions, each number as the Kernel workspace shows it.
TEST(KernelCoalescingScenario, TheCaptionsNumbersHold) {
  auto fp16 = cuda_sim_run("kernel-coalescing.json", "");
  fp16->run(40);
  const StepKernelTrace a = trace_next_step(*fp16, 0, "kernel-coalescing.json");
  EXPECT_EQ(a.step, 40);
  EXPECT_EQ(a.k_format, "fp16");
  EXPECT_EQ(a.summary.kernel, "decode_split_batch_kernel");
  EXPECT_EQ(a.summary.grid.x, 4u);  // a column per KV head, one split
  // "28.6 KiB read in 1,832 transactions of 32 B that move 57 KiB, half of it used"
  EXPECT_EQ(a.summary.kv.distinct_bytes, 29312);  // 28.62 KiB
  EXPECT_EQ(a.summary.kv.sectors, 1832);
  EXPECT_EQ(a.summary.kv.sectors * 32, 2 * a.summary.kv.distinct_bytes);

  auto int4 = cuda_sim_run("kernel-coalescing.json", "", "int4");
  int4->run(41);
  const StepKernelTrace b = trace_next_step(*int4, 0, "kernel-coalescing.json");
  EXPECT_EQ(b.k_format, "int4");
  EXPECT_EQ(b.summary.kernel, "paged_attention_batch_kernel");
  EXPECT_EQ(b.summary.grid.x, 8u);  // "a thread block per query head (8 columns)"
  // "7,488 transactions where 512 would do" (its key codes)
  EXPECT_EQ(b.summary.by_what[sim::kTraceKCodes].sectors, 7488);
  EXPECT_EQ(b.summary.by_what[sim::kTraceKCodes].ideal_sectors, 512);
  // "87 KiB read for 9 KiB of cache"
  EXPECT_EQ(b.summary.kv.distinct_bytes, 89472);
  EXPECT_EQ(b.summary.kv_unique_bytes, 9320);
}

}  // namespace
}  // namespace kvscope

// Simulator on the real model: batched tokens equal solo tokens under preemption (recompute and
// swap, paged and contiguous, chunked prefill, every victim policy), determinism, rejection.
#include <gtest/gtest.h>

#include "engine/common/error.h"
#include "engine/trace/timeline_replay.h"
#include "tests/sched/sim_test_support.h"

namespace kvscope {
namespace {

SimConfig small_pool(PreemptionMode mode) {
  SimConfig c;
  c.block_size = 8;
  c.num_blocks = 16;  // 128 slots: 10 requests of up to ~70 tokens must preempt
  c.preemption = mode;
  c.host_blocks = 12;
  return c;
}

// Every request's generated tokens equal what it generates alone.
void expect_tokens_match_solo(const Simulator& sim, const std::vector<SimRequest>& requests) {
  for (int i = 0; i < static_cast<int>(requests.size()); ++i) {
    const RequestRun& r = sim.request(i);
    ASSERT_EQ(r.phase, RequestPhase::kFinished) << "request " << i;
    EXPECT_EQ(r.generated_tokens(), test::generate_alone(requests[static_cast<std::size_t>(i)]))
        << "request " << i << " (preempted " << r.preemptions << " times)";
  }
}

struct Case {
  const char* name;
  SimConfig config;
};

class BatchedEqualsSolo : public ::testing::TestWithParam<int> {};

std::vector<Case> cases() {
  std::vector<Case> out;
  out.push_back({"paged_recompute", small_pool(PreemptionMode::kRecompute)});
  out.push_back({"paged_swap", small_pool(PreemptionMode::kSwap)});
  SimConfig tiny_host = small_pool(PreemptionMode::kSwap);
  tiny_host.host_blocks = 3;  // swap falls back to recompute when the host tier is full
  out.push_back({"paged_swap_small_host", tiny_host});
  SimConfig chunked = small_pool(PreemptionMode::kRecompute);
  chunked.max_tokens_per_step = 12;
  out.push_back({"paged_chunked_prefill", chunked});
  SimConfig longest = small_pool(PreemptionMode::kSwap);
  longest.victim = VictimPolicy::kLongest;
  out.push_back({"victim_longest", longest});
  SimConfig prio = small_pool(PreemptionMode::kRecompute);
  prio.victim = VictimPolicy::kLowestPriority;
  out.push_back({"victim_lowest_priority", prio});
  SimConfig contiguous = small_pool(PreemptionMode::kRecompute);
  contiguous.allocator = AllocatorKind::kContiguous;
  contiguous.max_seq_len = 72;  // 9 blocks reserved per request: at most one runs at a time...
  contiguous.num_blocks = 20;   // ...two fit, with external fragmentation in between
  out.push_back({"contiguous", contiguous});
  SimConfig contiguous_swap = contiguous;
  contiguous_swap.preemption = PreemptionMode::kSwap;
  out.push_back({"contiguous_swap", contiguous_swap});
  return out;
}

TEST_P(BatchedEqualsSolo, EveryTokenMatchesTheRequestAlone) {
  const Case c = cases()[static_cast<std::size_t>(GetParam())];
  SCOPED_TRACE(c.name);
  const auto requests = test::mixed_requests(10);
  Simulator sim(c.config, test::real_sim_model(), requests);
  test::run_checked(sim);
  expect_tokens_match_solo(sim, requests);
  const StepMetrics& last = sim.timeline()->metrics(sim.timeline()->num_steps() - 1);
  EXPECT_EQ(last.requests_finished, 10);
  EXPECT_EQ(last.blocks_used, 0);
  int peak_running = 0;
  for (const StepMetrics& m : sim.timeline()->all_metrics())
    peak_running = std::max(peak_running, m.requests_running);
  EXPECT_GE(peak_running, 2) << "requests must actually run concurrently";
  if (c.config.allocator == AllocatorKind::kPaged) {
    EXPECT_GE(peak_running, 8) << "8+ concurrent requests";
    EXPECT_GT(last.preemptions, 0) << "the pool is meant to be too small";
  }
  if (c.config.preemption == PreemptionMode::kRecompute &&
      c.config.allocator == AllocatorKind::kPaged) {
    EXPECT_GT(last.tokens_recomputed, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, BatchedEqualsSolo, ::testing::Range(0, 8),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return std::string(cases()[static_cast<std::size_t>(p.param)].name);
                         });

TEST(Simulator, SwapMovesBlocksThroughTheHostTier) {
  const auto requests = test::mixed_requests(10);
  Simulator sim(small_pool(PreemptionMode::kSwap), test::real_sim_model(), requests);
  test::run_checked(sim);
  int swapped_out = 0, swapped_in = 0, peak_swapped = 0;
  for (const Event& e : sim.timeline()->events()) {
    swapped_out += e.type == EventType::kSwappedOut;
    swapped_in += e.type == EventType::kSwappedIn;
  }
  for (const StepMetrics& m : sim.timeline()->all_metrics())
    peak_swapped = std::max(peak_swapped, m.requests_swapped);
  EXPECT_GT(swapped_out, 0);
  EXPECT_EQ(swapped_out, swapped_in);
  EXPECT_GT(peak_swapped, 0);
  EXPECT_EQ(sim.host_tier().num_used(), 0);
}

TEST(Simulator, SeededSamplingIsIndependentOfBatching) {
  const auto requests = test::mixed_requests(10);
  SimConfig batched = small_pool(PreemptionMode::kRecompute);
  batched.sampler.temperature = 0.9f;
  batched.sampler.seed = 1234;
  Simulator sim(batched, test::real_sim_model(), requests);
  test::run_checked(sim);
  int differs_from_greedy = 0;
  for (int i : {0, 4, 9}) {
    // The same request alone (same id, so the same seed stream), in a pool that never preempts.
    std::vector<SimRequest> alone(static_cast<std::size_t>(i) + 1,
                                  requests[static_cast<std::size_t>(i)]);
    for (int j = 0; j < i; ++j)
      alone[static_cast<std::size_t>(j)].arrival_step = 100000;  // never run
    SimConfig big = batched;
    big.num_blocks = 64;
    Simulator solo(big, test::real_sim_model(), alone);
    while (solo.current_step() < 2000 && solo.request(i).phase != RequestPhase::kFinished)
      solo.step();
    EXPECT_EQ(sim.request(i).generated_tokens(), solo.request(i).generated_tokens())
        << "request " << i;
    differs_from_greedy += sim.request(i).generated_tokens() !=
                           test::generate_alone(requests[static_cast<std::size_t>(i)]);
  }
  EXPECT_GT(differs_from_greedy, 0) << "temperature 0.9 should not reproduce greedy output";
}

TEST(Simulator, DeterministicRecordingBytes) {
  const auto requests = test::mixed_requests(10);
  std::vector<std::vector<char>> files;
  for (int run = 0; run < 2; ++run) {
    Simulator sim(small_pool(PreemptionMode::kSwap), test::real_sim_model(), requests);
    sim.run(5000);
    const std::string path = test::temp_path("det" + std::to_string(run) + ".kvr");
    sim.timeline()->save(path);
    files.push_back(test::read_bytes(path));
  }
  ASSERT_GT(files[0].size(), 1000u);
  EXPECT_EQ(files[0], files[1]);
}

TEST(Simulator, RejectsRequestsThatCanNeverFit) {
  auto requests = test::mixed_requests(3);
  SimRequest huge = requests[0];
  huge.max_new_tokens = 200;  // > 128 slots in the pool
  requests.push_back(huge);
  SimRequest too_long = requests[0];
  too_long.max_new_tokens = 600;  // > the model's 512-token context
  requests.push_back(too_long);
  Simulator sim(small_pool(PreemptionMode::kRecompute), test::real_sim_model(), requests);
  test::run_checked(sim);
  EXPECT_EQ(sim.request(3).phase, RequestPhase::kRejected);
  EXPECT_NE(sim.request(3).reject_reason.find("whole pool has 16"), std::string::npos)
      << sim.request(3).reject_reason;
  EXPECT_EQ(sim.request(4).phase, RequestPhase::kRejected);
  EXPECT_NE(sim.request(4).reject_reason.find("context"), std::string::npos)
      << sim.request(4).reject_reason;
  int rejected_events = 0;
  for (const Event& e : sim.timeline()->events()) {
    if (e.type != EventType::kRequestRejected) continue;
    ++rejected_events;
    EXPECT_EQ(e.a, static_cast<std::int64_t>(e.request == 3 ? RejectReason::kLargerThanPool
                                                            : RejectReason::kLargerThanContext));
  }
  EXPECT_EQ(rejected_events, 2);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(sim.request(i).phase, RequestPhase::kFinished);
}

TEST(Simulator, BadInputIsAnErrorNotACrash) {
  auto requests = test::mixed_requests(1);
  requests[0].prompt_tokens.push_back(100000);
  EXPECT_THROW(Simulator(SimConfig{}, test::real_sim_model(), requests), Error);
  requests = test::mixed_requests(1);
  requests[0].max_new_tokens = 0;
  EXPECT_THROW(Simulator(SimConfig{}, test::real_sim_model(), requests), Error);
  SimConfig c;
  c.allocator = AllocatorKind::kContiguous;
  c.num_blocks = 4;  // cannot hold even one 512-token reservation
  EXPECT_THROW(Simulator(c, test::real_sim_model(), test::mixed_requests(1)), Error);
}

TEST(Simulator, BookkeepingOnlyModeRunsWithoutWeights) {
  SimConfig c = small_pool(PreemptionMode::kSwap);
  SimModel shape{test::real_model().model->config(), nullptr};
  Simulator sim(c, shape, test::mixed_requests(10));
  test::run_checked(sim);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(sim.request(i).generated, sim.request(i).spec.max_new_tokens);
  }
  EXPECT_EQ(sim.host_tier().bytes(), 0u);
}

}  // namespace
}  // namespace kvscope

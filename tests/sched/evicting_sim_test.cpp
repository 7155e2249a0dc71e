// Token eviction inside the Simulator on the real model: a budget that covers every request
// changes nothing (tokens and per-step metrics), a small budget fits more requests into a tiny
// pool and every request's tokens equal the request generated alone through EvictingCacheHook
// with the same policy (recompute preemption replays evictions), recordings are deterministic,
// and impossible combinations are one-line errors at construction.
#include <gtest/gtest.h>

#include <cstdio>

#include "engine/common/error.h"
#include "engine/evict/eviction_hook.h"
#include "tests/sched/sim_test_support.h"

namespace kvscope {
namespace {

EvictorOptions evictor(EvictionKind kind, int budget,
                       CompactionPolicy compaction = CompactionPolicy::kNever,
                       PositionMode positions = PositionMode::kKeep) {
  EvictorOptions o;
  o.policy.kind = kind;
  o.policy.budget = budget;
  o.policy.sinks = 4;
  o.compaction = compaction;
  o.positions = positions;
  return o;
}

SimConfig tiny_pool(int num_blocks) {
  SimConfig c;
  c.block_size = 8;
  c.num_blocks = num_blocks;
  c.preemption = PreemptionMode::kRecompute;
  return c;
}

// Greedy generation of one request alone through a private paged cache and its own
// EvictingCacheHook (the path of `kvscope generate --evict`), stopping after BOS or EOS.
std::vector<int> generate_alone_evicting(const SimRequest& request, const EvictorOptions& o,
                                         int block_size) {
  const auto& m = test::real_model();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  const ModelConfig& c = m.model->config();
  const int blocks = (c.seq_len + block_size - 1) / block_size;
  KvLayout layout{c.n_layers, c.n_kv_heads, c.head_dim(), block_size, blocks, {}, {}};
  KvCacheManager cache(layout, AllocatorKind::kPaged, c.seq_len, true);
  const SeqId seq(0);
  cache.require_add_sequence(seq);
  const int prompt = static_cast<int>(request.prompt_tokens.size());
  EvictingCacheHook hook(o, c, prompt + request.max_new_tokens);
  hook.begin(cache, seq, *backend);
  std::vector<int> tokens = request.prompt_tokens, generated;
  for (int pos = 0; static_cast<int>(generated.size()) < request.max_new_tokens; ++pos) {
    cache.require_append_slots(seq, 1);
    const KvSeqView view = hook.view();
    const int rope_pos = hook.position();
    std::span<float> logits =
        t.forward(tokens[static_cast<std::size_t>(pos)], rope_pos, view, hook.observer());
    const bool in_prompt = pos + 1 < prompt;
    const int next = in_prompt ? 0 : argmax(logits);
    hook.after_token();
    if (in_prompt) continue;
    tokens.push_back(next);
    generated.push_back(next);
    if (next == kTokenBos || next == kTokenEos) break;
  }
  return generated;
}

std::int64_t count_events(const Simulator& sim, EventType type) {
  std::int64_t n = 0;
  for (const Event& e : sim.timeline()->events()) n += e.type == type;
  return n;
}

TEST(EvictingSimulator, BudgetCoveringEveryRequestChangesNothing) {
  const auto requests = test::mixed_requests(10);
  SimConfig plain = tiny_pool(16);  // preempts: recompute must also be unchanged
  SimConfig evicting = plain;
  evicting.token_eviction = evictor(EvictionKind::kH2O, 512, CompactionPolicy::kAlways);
  Simulator a(plain, test::real_sim_model(), requests);
  Simulator b(evicting, test::real_sim_model(), requests);
  test::run_checked(a);
  test::run_checked(b);
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(a.request(i).generated_tokens(), b.request(i).generated_tokens()) << "request " << i;
  EXPECT_EQ(count_events(b, EventType::kTokensEvicted), 0);
  const auto ma = a.timeline()->all_metrics(), mb = b.timeline()->all_metrics();
  ASSERT_EQ(ma.size(), mb.size());
  EXPECT_GT(ma.back().preemptions, 0);
  for (std::size_t s = 0; s < ma.size(); ++s) {
    const StepMetrics &x = ma[s], &y = mb[s];
    EXPECT_TRUE(
        x.blocks_used == y.blocks_used && x.slots_filled == y.slots_filled &&
        x.slots_allocated == y.slots_allocated && x.internal_frag_slots == y.internal_frag_slots &&
        x.free_blocks == y.free_blocks && x.requests_running == y.requests_running &&
        x.requests_waiting == y.requests_waiting && x.requests_finished == y.requests_finished &&
        x.preemptions == y.preemptions && x.tokens_recomputed == y.tokens_recomputed &&
        x.prefill_tokens == y.prefill_tokens && x.decode_tokens == y.decode_tokens &&
        x.kv_bytes_used == y.kv_bytes_used)
        << "step " << s;
  }
}

struct PolicyCase {
  const char* name;
  EvictorOptions options;
};

std::vector<PolicyCase> policy_cases() {
  return {
      {"window", evictor(EvictionKind::kWindow, 16)},
      {"sinks_window_half", evictor(EvictionKind::kSinksWindow, 20, CompactionPolicy::kHalfEmpty)},
      {"h2o_always", evictor(EvictionKind::kH2O, 16, CompactionPolicy::kAlways)},
      {"tova_shift",
       evictor(EvictionKind::kTova, 16, CompactionPolicy::kNever, PositionMode::kShift)},
      {"snapkv_always", evictor(EvictionKind::kSnapKV, 16, CompactionPolicy::kAlways)},
      {"random", evictor(EvictionKind::kRandom, 16, CompactionPolicy::kAlways)},
  };
}

class EvictingBatchedEqualsSolo : public ::testing::TestWithParam<int> {};

TEST_P(EvictingBatchedEqualsSolo, FitsMoreAndEveryTokenMatchesTheRequestAlone) {
  const PolicyCase pc = policy_cases()[static_cast<std::size_t>(GetParam())];
  const auto requests = test::mixed_requests(10);
  SimConfig plain = tiny_pool(10);  // 80 slots: every request fits alone, few at once
  SimConfig evicting = plain;
  evicting.token_eviction = pc.options;
  Simulator a(plain, test::real_sim_model(), requests);
  Simulator b(evicting, test::real_sim_model(), requests);
  test::run_checked(a);
  test::run_checked(b);
  const StepMetrics& la = a.timeline()->all_metrics().back();
  const StepMetrics& lb = b.timeline()->all_metrics().back();
  EXPECT_EQ(la.requests_finished, 10);
  EXPECT_EQ(lb.requests_finished, 10);
  EXPECT_LT(lb.preemptions, la.preemptions) << "eviction keeps sequences small";
  std::printf("[ %s ] steps %d / %d, preemptions %lld / %lld, recomputed %lld / %lld\n", pc.name,
              b.timeline()->num_steps(), a.timeline()->num_steps(),
              static_cast<long long>(lb.preemptions), static_cast<long long>(la.preemptions),
              static_cast<long long>(lb.tokens_recomputed),
              static_cast<long long>(la.tokens_recomputed));
  EXPECT_LT(lb.tokens_recomputed, la.tokens_recomputed);
  EXPECT_LT(b.timeline()->num_steps(), a.timeline()->num_steps()) << "less recompute: done sooner";
  EXPECT_GT(count_events(b, EventType::kTokensEvicted), 0);
  EXPECT_GT(count_events(b, EventType::kEvictedPosition), 0);
  std::int64_t evicted = 0;
  for (const Event& e : b.timeline()->events())
    if (e.type == EventType::kTokensEvicted) evicted += e.a;
  EXPECT_EQ(evicted, count_events(b, EventType::kEvictedPosition));
  if (pc.options.compaction == CompactionPolicy::kAlways) {
    EXPECT_GT(count_events(b, EventType::kSlotMoved), 0);
  }
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(b.request(i).generated_tokens(),
              generate_alone_evicting(requests[static_cast<std::size_t>(i)], pc.options,
                                      evicting.block_size))
        << pc.name << " request " << i << " (preempted " << b.request(i).preemptions << " times)";
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, EvictingBatchedEqualsSolo, ::testing::Range(0, 6),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return std::string(
                               policy_cases()[static_cast<std::size_t>(p.param)].name);
                         });

TEST(EvictingSimulator, RecomputeReplaysEvictions) {
  const auto requests = test::mixed_requests(10);
  SimConfig c = tiny_pool(4);  // 32 slots: requests preempt each other even with eviction
  c.token_eviction = evictor(EvictionKind::kH2O, 12, CompactionPolicy::kAlways);
  Simulator sim(c, test::real_sim_model(), requests);
  test::run_checked(sim);
  EXPECT_GT(sim.timeline()->all_metrics().back().preemptions, 0);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(sim.request(i).generated_tokens(),
              generate_alone_evicting(requests[static_cast<std::size_t>(i)], c.token_eviction,
                                      c.block_size))
        << "request " << i << " (preempted " << sim.request(i).preemptions << " times)";
  }
}

TEST(EvictingSimulator, DeterministicRecordingBytes) {
  const auto requests = test::mixed_requests(10);
  SimConfig c = tiny_pool(8);
  c.token_eviction = evictor(EvictionKind::kTova, 16, CompactionPolicy::kHalfEmpty);
  std::vector<std::vector<char>> files;
  for (int run = 0; run < 2; ++run) {
    Simulator sim(c, test::real_sim_model(), requests);
    sim.run(5000);
    const std::string path = test::temp_path("evict_det" + std::to_string(run) + ".kvr");
    sim.timeline()->save(path);
    files.push_back(test::read_bytes(path));
    const Timeline back = Timeline::load(path);
    EXPECT_EQ(back.num_events(), sim.timeline()->num_events());
  }
  ASSERT_GT(files[0].size(), 1000u);
  EXPECT_EQ(files[0], files[1]);
}

void expect_error(SimConfig c, const std::string& needle, SimModel model) {
  try {
    Simulator sim(c, std::move(model), test::mixed_requests(2));
    FAIL() << "expected an error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(EvictingSimulator, ImpossibleCombinationsAreErrors) {
  SimConfig base = tiny_pool(64);
  base.token_eviction = evictor(EvictionKind::kWindow, 16);
  const SimModel real = test::real_sim_model();
  SimConfig contiguous = base;
  contiguous.allocator = AllocatorKind::kContiguous;
  contiguous.max_seq_len = 64;
  expect_error(contiguous, "needs the paged allocator, got contiguous", real);
  SimConfig prefix = base;
  prefix.prefix_caching = true;
  expect_error(prefix, "with prefix caching is not supported", real);
  SimConfig kivi = base;
  kivi.k_format = parse_kv_format("kivi2", "test");
  kivi.v_format = kivi.k_format;
  expect_error(kivi, "KIVI", real);
  SimConfig swap = base;
  swap.preemption = PreemptionMode::kSwap;
  swap.host_blocks = 8;
  expect_error(swap, "expected preemption recompute", real);
  SimConfig budget = base;
  budget.token_eviction.policy.budget = 1;
  expect_error(budget, "expected an integer >= 2, got 1", real);
  expect_error(base, "needs the model's weights",
               SimModel{test::real_model().model->config(), nullptr});
}

TEST(EvictingSimulator, RejectsOnlyWhatCannotFitEvenWithEviction) {
  auto requests = test::mixed_requests(2);
  requests[1].max_new_tokens = 200;  // 200+ tokens: far more than the 4-block pool without eviction
  SimConfig c = tiny_pool(4);
  c.token_eviction = evictor(EvictionKind::kWindow, 16, CompactionPolicy::kAlways);
  Simulator sim(c, test::real_sim_model(), requests);
  test::run_checked(sim);
  EXPECT_EQ(sim.request(1).phase, RequestPhase::kFinished);
  SimConfig big_budget = c;
  big_budget.token_eviction.policy.budget = 64;  // 8 blocks even when packed: more than the pool
  Simulator rejecting(big_budget, test::real_sim_model(), requests);
  test::run_checked(rejecting);
  EXPECT_EQ(rejecting.request(1).phase, RequestPhase::kRejected);
  EXPECT_NE(rejecting.request(1).reject_reason.find("token eviction at budget 64"),
            std::string::npos)
      << rejecting.request(1).reject_reason;
}

}  // namespace
}  // namespace kvscope

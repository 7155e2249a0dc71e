// The Scheduler on its own, with no model and no executor: a cache without storage, a swap space
// without bytes, and tokens "sampled" by the test. What it must do is read off vLLM's scheduler
// (FCFS admission within a token budget, chunked prefill, running requests grown first, a victim
// preempted when the pool is full and no admission in that step, swapped requests back before new
// ones) and checked step by step on small hand-sized pools; then the whole Simulator without
// weights must record exactly the events this bare scheduler records.
#include "engine/sched/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/sched/simulator.h"

namespace kvscope {
namespace {

ModelConfig tiny_shape() {
  ModelConfig m;
  m.dim = 64;
  m.hidden_dim = 128;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.vocab_size = 512;
  m.seq_len = 256;
  return m;
}

SimRequest request(int prompt, int new_tokens, int arrival = 0, int priority = 0, int n = 1) {
  SimRequest r;
  r.arrival_step = arrival;
  for (int i = 0; i < prompt; ++i) r.prompt_tokens.push_back(1 + (i % 100));
  r.max_new_tokens = new_tokens;
  r.priority = priority;
  r.n_samples = n;
  return r;
}

// Collects what the scheduler emits.
struct EventLog final : EventSink {
  std::vector<Event> events;
  void emit(const Event& e) override { events.push_back(e); }
  int count(EventType t) const {
    int n = 0;
    for (const Event& e : events) n += e.type == t ? 1 : 0;
    return n;
  }
};

// Records what a SequenceListener is told, as "+id" (started) and "-id" (dropped).
struct ListenerLog final : SequenceListener {
  std::vector<std::string> calls;
  void on_sequence_started(const RequestRun& r) override { calls.push_back(signed_id('+', r.id)); }
  void on_sequence_dropped(std::int32_t id) override { calls.push_back(signed_id('-', id)); }
  // (Built by append: GCC 12 warns falsely on `"+" + std::to_string(...)` at -O3.)
  static std::string signed_id(char sign, std::int32_t id) {
    std::string s(1, sign);
    return s.append(std::to_string(id));
  }
};

// A weight-free scheduler over its own cache, swap space and (optionally) prefix cache.
class Bench {
 public:
  Bench(SimConfig config, std::vector<SimRequest> requests, EventSink* sink = nullptr)
      : config_(std::move(config)) {
    const ModelConfig m = tiny_shape();
    const KvLayout layout = kv_layout_for(m, config_.block_size, config_.num_blocks,
                                          config_.k_format, config_.v_format);
    cache_ = std::make_unique<KvCacheManager>(layout, config_.allocator,
                                              config_.reservation(m.seq_len), false);
    swap_ = std::make_unique<HostKvTier>(layout, config_.host_blocks, false);
    if (sink != nullptr) cache_->set_event_sink(sink, &step_);
    if (config_.prefix_caching) {
      PrefixCacheConfig pc;
      pc.block_size = config_.block_size;
      prefix_ = std::make_unique<PrefixCache>(cache_->pool(), pc, sink);
      cache_->set_block_source(prefix_.get());
    }
    Scheduler::Parts parts;
    parts.cache = cache_.get();
    parts.prefix = prefix_.get();
    parts.swap = swap_.get();
    parts.events = sink;
    parts.step = &step_;
    scheduler_ = std::make_unique<Scheduler>(config_, m.seq_len, parts, std::move(requests));
  }
  ~Bench() { cache_->set_event_sink(nullptr, nullptr); }

  // One step as the Simulator runs it, each request sampling token 0 (what a run without weights
  // samples); returns the plan.
  StepPlan step() {
    if (prefix_) prefix_->set_step(step_);
    scheduler_->arrive();
    StepPlan plan = scheduler_->schedule();
    for (const StepPlan::Entry& entry : plan.entries) {
      RequestRun& r = scheduler_->request(entry.id);
      if (!scheduler_->record_computed(plan, entry)) continue;
      for (std::int32_t child : scheduler_->forks_due(r)) {
        scheduler_->fork(r, child);
        scheduler_->append_token(scheduler_->request(child), 0, false);
      }
      scheduler_->append_token(r, 0, false);
    }
    scheduler_->check_invariants();
    cache_->check_invariants();
    ++step_;
    return plan;
  }
  int run_to_end(int max_steps = 1000) {
    while (!scheduler_->done()) {
      if (step_ >= max_steps) ADD_FAILURE() << "not done after " << max_steps << " steps";
      if (step_ >= max_steps) break;
      step();
    }
    return step_;
  }

  Scheduler& scheduler() { return *scheduler_; }
  const KvCacheManager& cache() const { return *cache_; }
  const HostKvTier& swap() const { return *swap_; }

 private:
  SimConfig config_;
  int step_ = 0;
  std::unique_ptr<KvCacheManager> cache_;
  std::unique_ptr<PrefixCache> prefix_;
  std::unique_ptr<HostKvTier> swap_;
  std::unique_ptr<Scheduler> scheduler_;
};

SimConfig pool(int num_blocks, int block_size = 4) {
  SimConfig c;
  c.block_size = block_size;
  c.num_blocks = num_blocks;
  return c;
}

std::vector<std::pair<int, int>> entries(const StepPlan& p) {
  std::vector<std::pair<int, int>> out;
  for (const StepPlan::Entry& e : p.entries) out.emplace_back(e.id, e.tokens);
  return out;
}

using Plan = std::vector<std::pair<int, int>>;

TEST(Scheduler, AdmitsFirstComeFirstServedWithinTheTokenBudgetAndChunksPrefill) {
  SimConfig c = pool(64);
  c.max_tokens_per_step = 16;
  Bench b(c, {request(10, 3), request(10, 3), request(10, 3)});
  // Step 0: request 0's whole prompt, then the 6 tokens left of the budget go to request 1's.
  EXPECT_EQ(entries(b.step()), (Plan{{0, 10}, {1, 6}}));
  // Step 1: running requests first (0 decodes, 1 finishes its prompt), then 2's first chunk.
  EXPECT_EQ(entries(b.step()), (Plan{{0, 1}, {1, 4}, {2, 10}}));
  EXPECT_EQ(b.scheduler().request(2).admitted_step, 1);
  EXPECT_EQ(b.scheduler().request(0).generated, 2);
  EXPECT_EQ(b.scheduler().request(1).generated, 1);
  b.run_to_end();
  for (int id = 0; id < 3; ++id) EXPECT_EQ(b.scheduler().request(id).generated, 3);
}

TEST(Scheduler, AStepThatPreemptsAdmitsNothingAndTheVictimIsRecomputedFromTheFront) {
  // 5 blocks of 4 tokens. Two requests of 8-token prompts hold 2 blocks each; at 9 tokens each
  // needs a third block, and only one is free.
  SimConfig c = pool(5);
  Bench b(c, {request(8, 6), request(8, 6), request(4, 2, /*arrival=*/1)});
  EXPECT_EQ(entries(b.step()), (Plan{{0, 8}, {1, 8}}));
  // Step 1: request 0 takes the last block for token 9; request 1 cannot grow, is the last
  // admitted, so it is its own victim; request 2 (arrived now) is not admitted in this step.
  const StepPlan p = b.step();
  EXPECT_EQ(entries(p), (Plan{{0, 1}}));
  EXPECT_TRUE(p.preempted);
  const RequestRun& victim = b.scheduler().request(1);
  EXPECT_EQ(victim.phase, RequestPhase::kWaiting);
  EXPECT_EQ(victim.num_computed, 0);
  EXPECT_EQ(victim.preemptions, 1);
  EXPECT_EQ(b.scheduler().request(2).phase, RequestPhase::kWaiting);
  // The victim went to the front of the queue: it is readmitted before request 2, and its 8
  // prompt tokens are computed again (the token it sampled had not been computed yet).
  b.run_to_end();
  EXPECT_LT(*b.scheduler().request(1).admitted_step, *b.scheduler().request(2).admitted_step);
  StepMetrics m;
  b.scheduler().fill_metrics(m);
  EXPECT_EQ(m.preemptions, 1);
  EXPECT_EQ(m.tokens_recomputed, 8);
  EXPECT_EQ(m.requests_finished, 3);
}

TEST(Scheduler, EachVictimPolicyPicksItsRequest) {
  // Three running requests: 0 is longest, 1 has the lowest priority, 2 was admitted last. Pool of
  // 6 blocks of 4: step 0 prefills 11 + 4 + 4 tokens into 3 + 1 + 1 blocks and each samples one.
  // Step 1 grows them in admission order: 0's 12th token fits its third block, 1 takes the last
  // free block, 2 finds none, so a victim goes.
  const std::vector<SimRequest> reqs = {request(11, 8, 0, 5), request(4, 8, 0, 1),
                                        request(4, 8, 0, 5)};
  const auto victim_of = [&](VictimPolicy v) {
    SimConfig c = pool(6);
    c.victim = v;
    Bench b(c, reqs);
    b.step();
    const StepPlan p = b.step();
    EXPECT_TRUE(p.preempted);
    for (int id = 0; id < 3; ++id)
      if (b.scheduler().request(id).preemptions > 0) return id;
    return -1;
  };
  EXPECT_EQ(victim_of(VictimPolicy::kLastAdmitted), 2);
  EXPECT_EQ(victim_of(VictimPolicy::kLongest), 0);
  EXPECT_EQ(victim_of(VictimPolicy::kLowestPriority), 1);
}

TEST(Scheduler, SwapMovesComputedBlocksOutAndBringsThemBackBeforeNewAdmissions) {
  SimConfig c = pool(5);
  c.preemption = PreemptionMode::kSwap;
  c.host_blocks = 8;
  EventLog log;
  Bench b(c, {request(8, 6), request(8, 6), request(4, 2, /*arrival=*/2)}, &log);
  b.step();
  b.step();  // request 1 cannot grow: swapped out with its 2 blocks of computed K/V
  const RequestRun& swapped = b.scheduler().request(1);
  EXPECT_EQ(swapped.phase, RequestPhase::kSwapped);
  EXPECT_EQ(swapped.num_computed, 8);  // its prompt; the token it sampled is not computed yet
  EXPECT_EQ(swapped.host_slots.size(), 2u);
  EXPECT_EQ(b.swap().num_used(), 2);
  b.run_to_end();
  // Every swap-out came back in (nothing recomputed), and request 2 was admitted only when no
  // request was out.
  EXPECT_GT(log.count(EventType::kSwappedOut), 0);
  EXPECT_EQ(log.count(EventType::kSwappedIn), log.count(EventType::kSwappedOut));
  int out = 0;
  for (const Event& e : log.events) {
    out += e.type == EventType::kSwappedOut ? 1 : e.type == EventType::kSwappedIn ? -1 : 0;
    if (e.type == EventType::kAdmitted && e.request == 2) {
      EXPECT_EQ(out, 0) << "at step " << e.step;
    }
  }
  EXPECT_EQ(b.swap().num_used(), 0);
  StepMetrics m;
  b.scheduler().fill_metrics(m);
  EXPECT_EQ(m.tokens_recomputed, 0);
  EXPECT_EQ(m.requests_finished, 3);
}

TEST(Scheduler, RejectsWhatCanNeverFitWithTheReason) {
  SimConfig c = pool(4);  // 16 tokens in all
  Bench b(c, {request(20, 1), request(250, 10), request(8, 4)});
  b.step();
  EXPECT_EQ(b.scheduler().request(0).phase, RequestPhase::kRejected);
  EXPECT_EQ(b.scheduler().request(0).reject_reason,
            "needs 5 blocks (20 tokens at block size 4) but the whole pool has 4");
  EXPECT_EQ(b.scheduler().request(1).reject_reason,
            "prompt 250 + max_new_tokens 10 needs 259 KV slots, more than the model context of "
            "256 tokens");
  EXPECT_EQ(b.scheduler().request(2).phase, RequestPhase::kRunning);
  b.run_to_end();
  StepMetrics m;
  b.scheduler().fill_metrics(m);
  EXPECT_EQ(m.requests_rejected, 2);
  EXPECT_EQ(m.requests_finished, 1);
}

TEST(Scheduler, MaxRunningCapsTheBatch) {
  SimConfig c = pool(64);
  c.max_running = 2;
  Bench b(c, {request(4, 3), request(4, 3), request(4, 3)});
  EXPECT_EQ(entries(b.step()), (Plan{{0, 4}, {1, 4}}));
  EXPECT_EQ(entries(b.step()), (Plan{{0, 1}, {1, 1}}));
  EXPECT_EQ(entries(b.step()), (Plan{{0, 1}, {1, 1}}));  // both finish at 3 tokens
  EXPECT_EQ(entries(b.step()), (Plan{{2, 4}}));
}

TEST(Scheduler, TellsItsListenerWhenASequenceStartsAndIsDropped) {
  // Room for both: each starts, 0 finishes at step 1 (2 tokens), 1 later.
  Bench roomy(pool(6), {request(8, 2), request(8, 6)});
  ListenerLog listener;
  roomy.scheduler().set_listener(&listener);
  roomy.run_to_end();
  EXPECT_EQ(listener.calls, (std::vector<std::string>{"+0", "+1", "-0", "-1"}));

  // One block short at step 1: 0 takes the last block, 1 is preempted by recompute (dropped)
  // before 0 finishes in the same step, and starts again at step 2.
  Bench pressed(pool(5), {request(8, 2), request(8, 6)});
  ListenerLog seen;
  pressed.scheduler().set_listener(&seen);
  pressed.run_to_end();
  EXPECT_EQ(seen.calls, (std::vector<std::string>{"+0", "+1", "-1", "-0", "+1", "-1"}));
}

TEST(Scheduler, ParallelSamplesForkOffTheirLeadAfterItsPromptAndShareItsBlocks) {
  SimConfig c = pool(32);
  c.prefix_caching = true;
  Bench b(c, {request(8, 4, 0, 0, /*n=*/3)});
  ASSERT_EQ(b.scheduler().num_requests(), 3);
  EXPECT_EQ(entries(b.step()), (Plan{{0, 8}}));  // the lead alone prefills
  for (int id = 1; id < 3; ++id) {
    const RequestRun& child = b.scheduler().request(id);
    EXPECT_EQ(child.fork_of, 0);
    EXPECT_EQ(child.phase, RequestPhase::kRunning);
    EXPECT_EQ(child.generated, 1);
    EXPECT_EQ(child.prefix_hit_tokens, 8);
  }
  // The 2 prompt blocks are held by all three sequences, and by the prefix cache.
  const BlockTable& lead = b.cache().table(SeqId(0));
  for (int i = 0; i < 2; ++i) EXPECT_EQ(b.cache().pool().ref_count(lead.blocks[i]), 4);
  EXPECT_EQ(entries(b.step()), (Plan{{0, 1}, {1, 1}, {2, 1}}));
  b.run_to_end();
}

// The Simulator without weights is this scheduler plus wiring: both record the same events.
TEST(Scheduler, TheSimulatorWithoutWeightsRecordsWhatTheBareSchedulerEmits) {
  SimConfig c = pool(6);
  c.max_tokens_per_step = 12;
  c.preemption = PreemptionMode::kSwap;
  c.host_blocks = 4;
  std::vector<SimRequest> reqs;
  for (int i = 0; i < 8; ++i) reqs.push_back(request(3 + 2 * i % 9, 2 + i % 5, i / 3));

  EventLog log;
  Bench b(c, reqs, &log);
  b.run_to_end();

  Simulator sim(c, SimModel{tiny_shape(), nullptr}, reqs);
  while (sim.step()) {
  }
  std::vector<Event> recorded;
  for (const Event& e : sim.timeline()->events())
    if (e.type != EventType::kStepEnd) recorded.push_back(e);
  ASSERT_EQ(recorded.size(), log.events.size());
  for (std::size_t i = 0; i < recorded.size(); ++i) {
    EXPECT_EQ(recorded[i], log.events[i])
        << "event " << i << ": " << event_type_name(recorded[i].type);
  }
  EXPECT_GT(log.count(EventType::kPreempted), 0);  // the run exercised preemption
}

}  // namespace
}  // namespace kvscope

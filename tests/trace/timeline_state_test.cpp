// Timeline::state_at against the live cache state at every step (real model, small pool with
// swaps and preemptions; and a 100k-block bookkeeping run), scrubbing in any order.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/trace/timeline_replay.h"
#include "tests/sched/sim_test_support.h"

namespace kvscope {
namespace {

// The pool and request state read directly from the simulator and its cache manager (not from
// events), in PoolState form.
PoolState live_state_of(const Simulator& sim) {
  const KvCacheManager& cache = sim.cache();
  const int bs = cache.layout().block_size;
  PoolState s = initial_pool_state(cache.pool().num_blocks(), bs);
  s.step = sim.current_step() - 1;
  std::vector<int> holders(s.blocks.size(), 0);
  for (SeqId id : cache.sequences()) {
    const BlockTable& t = cache.table(id);
    for (std::size_t l = 0; l < t.blocks.size(); ++l) {
      BlockState& b = s.blocks[static_cast<std::size_t>(t.blocks[l].value)];
      const int n = ++holders[static_cast<std::size_t>(t.blocks[l].value)];
      b.owner = id.value;
      b.logical = static_cast<std::int32_t>(l);
      b.ref_count = static_cast<std::int16_t>(cache.pool().ref_count(t.blocks[l]));
      b.filled =
          static_cast<std::int16_t>(std::clamp(t.num_tokens - static_cast<int>(l) * bs, 0, bs));
      b.status = n == 1 ? BlockStatus::kOwned : BlockStatus::kShared;
    }
  }
  if (const PrefixCache* pc = sim.prefix_cache()) {  // cached blocks; alone: cached-free
    for (std::size_t i = 0; i < s.blocks.size(); ++i) {
      BlockState& b = s.blocks[i];
      if (!pc->is_cached(BlockId(static_cast<std::int32_t>(i)))) continue;
      b.cached = true;
      b.ref_count = static_cast<std::int16_t>(holders[i] + 1);
      if (holders[i] == 0) {
        b.owner = -1;
        b.filled = static_cast<std::int16_t>(bs);
        b.status = BlockStatus::kCachedFree;
      }
    }
  }
  for (int i = 0; i < sim.num_requests(); ++i) {
    const RequestRun& r = sim.request(i);
    if (!r.arrived) continue;
    RequestState rs;
    rs.id = r.id;
    rs.phase = r.phase;
    if (r.phase == RequestPhase::kRunning) {
      const BlockTable& t = cache.table(SeqId(r.id));
      rs.num_tokens = t.num_tokens;
      for (BlockId b : t.blocks) rs.blocks.push_back(b.value);
    } else if (r.phase == RequestPhase::kSwapped) {
      rs.num_tokens = r.num_computed;
    }
    s.requests.push_back(rs);
  }
  return s;
}

void expect_same(const PoolState& got, const PoolState& want, int step) {
  ASSERT_EQ(got.step, want.step);
  ASSERT_EQ(got.blocks.size(), want.blocks.size());
  for (std::size_t b = 0; b < want.blocks.size(); ++b) {
    const BlockState& g = got.blocks[b];
    const BlockState& w = want.blocks[b];
    // Which holder counts as the owner of a shared block, and a cached-free block's position,
    // are presentation choices of the replay: only sole owners are compared.
    const bool sole = w.status == BlockStatus::kOwned || w.status == BlockStatus::kFree;
    ASSERT_TRUE((!sole || (g.owner == w.owner && g.logical == w.logical)) &&
                g.ref_count == w.ref_count && g.filled == w.filled && g.status == w.status &&
                g.cached == w.cached)
        << "step " << step << " block " << b << ": owner " << g.owner << "/" << w.owner
        << " logical " << g.logical << "/" << w.logical << " ref " << g.ref_count << "/"
        << w.ref_count << " filled " << g.filled << "/" << w.filled;
  }
  ASSERT_EQ(got.requests.size(), want.requests.size()) << "step " << step;
  for (std::size_t i = 0; i < want.requests.size(); ++i) {
    const RequestState& g = got.requests[i];
    const RequestState& w = want.requests[i];
    ASSERT_EQ(g.id, w.id) << "step " << step;
    ASSERT_EQ(g.phase, w.phase) << "step " << step << " request " << w.id;
    ASSERT_EQ(g.num_tokens, w.num_tokens) << "step " << step << " request " << w.id;
    ASSERT_EQ(g.blocks, w.blocks) << "step " << step << " request " << w.id;
  }
}

void check_every_step(Simulator& sim) {
  std::vector<std::pair<int, PoolState>> kept;  // every 5th live state, for scrubbing later
  while (sim.step()) {
    PoolState live = live_state_of(sim);
    const int step = sim.current_step() - 1;
    expect_same(sim.timeline()->state_at(step), live, step);
    if (::testing::Test::HasFatalFailure()) return;
    if (step % 5 == 0) kept.emplace_back(step, std::move(live));
  }
  // Scrub backwards, reusing one PoolState (the UI's per-frame path).
  PoolState out;
  for (auto it = kept.rbegin(); it != kept.rend(); ++it) {
    sim.timeline()->state_at(it->first, out);
    expect_same(out, it->second, it->first);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(TimelineState, EqualsLiveStateEveryStepWithSwapAndRecompute) {
  for (auto mode : {PreemptionMode::kSwap, PreemptionMode::kRecompute}) {
    for (auto alloc : {AllocatorKind::kPaged, AllocatorKind::kContiguous}) {
      SimConfig c;
      c.block_size = 8;
      c.num_blocks = alloc == AllocatorKind::kPaged ? 16 : 20;
      c.max_seq_len = alloc == AllocatorKind::kPaged ? 0 : 72;
      c.allocator = alloc;
      c.preemption = mode;
      c.host_blocks = 10;
      c.victim = VictimPolicy::kLongest;  // victims may have been planned earlier in the step
      c.max_tokens_per_step = 24;
      Simulator sim(c, test::real_sim_model(), test::mixed_requests(10));
      check_every_step(sim);
      EXPECT_GT(sim.timeline()->num_steps(), Timeline::kSnapshotInterval)
          << "snapshots must be exercised";
      EXPECT_GT(sim.timeline()->num_snapshots(), 1);
    }
  }
}

TEST(TimelineState, EqualsLiveStateWithPrefixCachingAndParallelSampling) {
  for (auto mode : {PreemptionMode::kSwap, PreemptionMode::kRecompute}) {
    SimConfig c;
    c.block_size = 4;
    c.num_blocks = 40;
    c.preemption = mode;
    c.host_blocks = 10;
    c.max_tokens_per_step = 24;
    c.prefix_caching = true;
    c.sampler.temperature = 0.8f;
    auto requests = test::mixed_requests(10);
    for (std::size_t i = 0; i < requests.size(); i += 3) requests[i].n_samples = 3;
    for (auto& r : requests)  // a shared prefix in front of every prompt
      r.prompt_tokens.insert(r.prompt_tokens.begin() + 1, {300, 301, 302, 303, 304, 305, 306});
    Simulator sim(c, test::real_sim_model(), requests);
    check_every_step(sim);
    int cached_free = 0, shared = 0;
    for (const StepMetrics& m : sim.timeline()->all_metrics())
      cached_free = std::max(cached_free, m.blocks_cached_free);
    for (const Event& e : sim.timeline()->events())
      shared += e.type == EventType::kBlockCopiedOnWrite || e.type == EventType::kBlockShared;
    EXPECT_GT(cached_free, 0);
    EXPECT_GT(shared, 0);
    EXPECT_GT(sim.timeline()->all_metrics().back().preemptions, 0);
    EXPECT_GT(sim.timeline()->num_steps(), Timeline::kSnapshotInterval);
  }
}

TEST(TimelineState, EqualsLiveStateEveryStepWithTokenEviction) {
  // Token eviction frees blocks from inside tables (BlockFreed a = 1), compacts (SlotMoved +
  // truncation) and leaves tables with fewer slots than tokens; replay must follow all of it.
  for (auto compaction :
       {CompactionPolicy::kNever, CompactionPolicy::kHalfEmpty, CompactionPolicy::kAlways}) {
    SimConfig c;
    c.block_size = 4;
    c.num_blocks = 14;
    c.preemption = PreemptionMode::kRecompute;
    c.max_tokens_per_step = 24;
    c.token_eviction.policy.kind = EvictionKind::kH2O;
    c.token_eviction.policy.budget = 12;
    c.token_eviction.compaction = compaction;
    Simulator sim(c, test::real_sim_model(), test::mixed_requests(10));
    check_every_step(sim);
    int inside = 0, moved = 0, evicted = 0;
    for (const Event& e : sim.timeline()->events()) {
      inside += e.type == EventType::kBlockFreed && e.a == 1;
      moved += e.type == EventType::kSlotMoved;
      evicted += e.type == EventType::kTokensEvicted;
    }
    EXPECT_GT(evicted, 0);
    if (compaction == CompactionPolicy::kNever) {
      EXPECT_GT(inside, 0);
    }
    if (compaction == CompactionPolicy::kAlways) {
      EXPECT_GT(moved, 0);
    }
    EXPECT_GT(sim.timeline()->all_metrics().back().preemptions, 0);
    EXPECT_GT(sim.timeline()->num_steps(), Timeline::kSnapshotInterval);
  }
}

TEST(TimelineState, HundredThousandBlocksBookkeeping) {
  ModelConfig shape = test::real_model().model->config();
  shape.seq_len = 16384;  // a long-context shape; bookkeeping only, no weights
  SimConfig c;
  c.block_size = 16;
  c.num_blocks = 100000;
  c.preemption = PreemptionMode::kSwap;
  c.host_blocks = 20000;
  std::vector<SimRequest> requests;
  for (int i = 0; i < 240; ++i) {
    SimRequest r;
    r.arrival_step = i % 40;
    r.prompt_tokens.assign(static_cast<std::size_t>(4000 + (i * 977) % 4000), 5);
    r.max_new_tokens = 60 + i % 50;
    requests.push_back(std::move(r));
  }
  Simulator sim(c, SimModel{shape, nullptr}, requests);
  check_every_step(sim);
  EXPECT_GT(sim.timeline()->all_metrics()[0].blocks_total, 0);
  int peak = 0;
  for (const StepMetrics& m : sim.timeline()->all_metrics()) peak = std::max(peak, m.blocks_used);
  EXPECT_GT(peak, 90000) << "the run is meant to fill the 100k-block pool";
}

}  // namespace
}  // namespace kvscope

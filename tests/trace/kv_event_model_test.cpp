// KvEventModel: live blocks keyed by rank, medium, group and hash; parents and depth; slots
// recycled; counters; the caps; and the recording as a Timeline (replayed, saved and loaded).
#include "engine/trace/kv_event_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/trace/timeline.h"
#include "tests/trace/kv_event_builders.h"

namespace kvscope {
namespace {

KvStreamEvent stored(std::vector<std::uint64_t> hashes, std::optional<std::uint64_t> parent,
                     std::string medium = "", std::int64_t group = 0) {
  KvStreamEvent e;
  e.kind = KvEventKind::kBlockStored;
  e.block_hashes = std::move(hashes);
  e.parent_hash = parent;
  e.block_size = 16;
  e.num_token_ids = static_cast<std::int64_t>(e.block_hashes.size()) * 16;
  e.medium = std::move(medium);
  e.group_idx = group;
  return e;
}

using test::batch;
using test::cleared;
using test::removed;

std::int64_t live_of(const KvEventModel& m, int rank) {
  auto it = m.by_rank().find(rank);
  return it == m.by_rank().end() ? 0 : it->second.live;
}

TEST(KvEventModel, ChainsKeepTheirParentsAndDepthInTheRecording) {
  KvEventModel m;
  m.apply(0, batch(1, {stored({10, 11}, std::nullopt)}));
  m.apply(0, batch(2, {stored({12}, 11)}));
  EXPECT_EQ(m.totals().live, 3);
  EXPECT_EQ(m.totals().blocks_stored, 3);
  EXPECT_EQ(m.totals().events[0], 2);
  EXPECT_EQ(m.totals().unknown_parents, 0);
  const Timeline t = m.build_timeline("chains");
  ASSERT_EQ(t.num_steps(), 2);
  EXPECT_EQ(t.header().num_blocks, 3);
  EXPECT_EQ(t.header().block_size, 16);
  // The importer's events: BlockAllocated (logical = depth, a = parent slot, b = block size),
  // then BlockCached (b = parent slot + 1) per block.
  const auto step1 = t.events_at(1);
  ASSERT_EQ(step1.size(), 2u);
  EXPECT_EQ(step1[0].type, EventType::kBlockAllocated);
  EXPECT_EQ(step1[0].block, 2);
  EXPECT_EQ(step1[0].logical, 2);
  EXPECT_EQ(step1[0].a, 1);
  EXPECT_EQ(step1[0].b, 16);
  EXPECT_EQ(step1[1].type, EventType::kBlockCached);
  EXPECT_EQ(step1[1].b, 2);
  const PoolState s = t.state_at(1);
  for (const BlockState& b : s.blocks) {
    EXPECT_EQ(b.status, BlockStatus::kCachedFree);
    EXPECT_TRUE(b.cached);
    EXPECT_EQ(b.filled, 16);
  }
  EXPECT_EQ(t.metrics(1).blocks_cached_free, 3);
  EXPECT_EQ(t.metrics(1).free_blocks, 0);
}

TEST(KvEventModel, RemovalFreesTheSlotForTheNextStoreAndUnknownsAreCounted) {
  KvEventModel m;
  m.apply(0, batch(1, {stored({1, 2, 3}, std::nullopt)}));
  m.apply(0, batch(5, {removed({2, 99})}));
  EXPECT_EQ(m.totals().live, 2);
  EXPECT_EQ(m.totals().blocks_removed, 1);
  EXPECT_EQ(m.totals().unknown_removals, 1);
  EXPECT_EQ(m.totals().short_lived, 0);       // 4 s after its store
  m.apply(0, batch(5.5, {stored({4}, 77)}));  // a parent never seen
  EXPECT_EQ(m.totals().unknown_parents, 1);
  const Timeline t = m.build_timeline("recycle");
  EXPECT_EQ(t.header().num_blocks, 3);  // block 4 took block 2's slot
  const auto step2 = t.events_at(2);
  ASSERT_FALSE(step2.empty());
  EXPECT_EQ(step2[0].block, 1);
  EXPECT_EQ(step2[0].logical, 0);  // unknown parent: a chain of its own
  EXPECT_EQ(step2[0].a, -1);
  EXPECT_EQ(t.events_at(1)[0].type, EventType::kCachedBlockEvicted);
  EXPECT_EQ(t.state_at(1).blocks[1].status, BlockStatus::kFree);
  m.apply(0, batch(5.9, {removed({4})}));
  EXPECT_EQ(m.totals().short_lived, 1);  // 0.4 s after its store
}

TEST(KvEventModel, MediaGroupsAndRanksAreSeparateCaches) {
  KvEventModel m;
  m.apply(0, batch(1, {stored({7}, std::nullopt), stored({7}, std::nullopt, "CPU"),
                       stored({7}, std::nullopt, "", 1)}));
  m.apply(1, batch(1, {stored({7, 8}, std::nullopt)}));
  EXPECT_EQ(m.totals().live, 5);
  EXPECT_EQ(m.totals().restored, 0);
  EXPECT_EQ(m.live_by_medium(), (std::map<std::string, std::int64_t>{{"CPU", 1}, {"GPU", 4}}));
  // nil medium and "GPU" are the same tier: this removes rank 0's group-0 GPU copy only.
  m.apply(0, batch(2, {removed({7}, "GPU")}));
  EXPECT_EQ(live_of(m, 0), 2);
  EXPECT_EQ(live_of(m, 1), 2);
  EXPECT_EQ(m.live_by_medium(0), (std::map<std::string, std::int64_t>{{"CPU", 1}, {"GPU", 1}}));
  // AllBlocksCleared empties the rank that sent it, every medium with --clear-scope all (by
  // default a stream with a "CPU" medium is vLLM's, whose clear leaves the CPU tier: see
  // kv_lookup_test.cpp); rank 1 keeps its blocks.
  m.set_clear_scope(KvClearScope::kAll);
  m.apply(0, batch(3, {cleared()}));
  EXPECT_EQ(live_of(m, 0), 0);
  EXPECT_EQ(live_of(m, 1), 2);
  EXPECT_EQ(m.totals().blocks_cleared, 2);
  EXPECT_EQ(m.totals().events[2], 1);
}

TEST(KvEventModel, RestoringALiveBlockKeepsOneCopy) {
  KvEventModel m;
  m.apply(0, batch(1, {stored({1, 2}, std::nullopt), stored({2}, 1)}));
  EXPECT_EQ(m.totals().live, 2);
  EXPECT_EQ(m.totals().blocks_stored, 3);
  EXPECT_EQ(m.totals().restored, 1);
}

TEST(KvEventModel, RestartDropsTheRankInTheNextBatchStep) {
  KvEventModel m;
  m.apply(0, batch(1, {stored({1, 2}, std::nullopt)}));
  m.apply(1, batch(1, {stored({3}, std::nullopt)}));
  m.restart(0);
  EXPECT_EQ(live_of(m, 0), 0);
  EXPECT_EQ(live_of(m, 1), 1);
  m.apply(0, batch(2, {stored({5}, std::nullopt)}));
  const Timeline t = m.build_timeline("restart");
  ASSERT_EQ(t.num_steps(), 3);           // one step per batch: the evictions ride with batch 3
  EXPECT_EQ(t.events_at(2).size(), 4u);  // 2 evictions + 1 store (allocated + cached)
  EXPECT_EQ(t.metrics(2).blocks_cached_free, 2);
}

TEST(KvEventModel, UndecodableBatchesAreEmptySteps) {
  KvEventModel m;
  m.apply_undecodable(0);
  m.apply(0, batch(1, {stored({1}, std::nullopt)}));
  EXPECT_EQ(m.totals().batches, 2);
  EXPECT_EQ(m.totals().undecodable, 1);
  const Timeline t = m.build_timeline("undecodable");
  ASSERT_EQ(t.num_steps(), 2);
  EXPECT_TRUE(t.events_at(0).empty());
}

TEST(KvEventModel, LiveMapCapCountsWhatItCannotHold) {
  KvModelLimits limits;
  limits.max_live_blocks = 2;
  KvEventModel m(limits);
  m.apply(0, batch(1, {stored({1, 2, 3}, std::nullopt)}));
  EXPECT_EQ(m.totals().live, 2);
  EXPECT_EQ(m.totals().untracked_blocks, 1);
  EXPECT_EQ(m.totals().blocks_stored, 3);
  m.apply(0, batch(2, {removed({1}), stored({4}, std::nullopt)}));
  EXPECT_EQ(m.totals().live, 2);  // room again after the removal
  EXPECT_EQ(m.totals().untracked_blocks, 1);
}

TEST(KvEventModel, RecordingStopsAtItsCapWhileCountersGoOn) {
  KvModelLimits limits;
  limits.max_recorded_events = 5;  // two stores of one block (2 events each) fit, the third not
  KvEventModel m(limits);
  for (std::uint64_t h = 1; h <= 4; ++h) m.apply(0, batch(1, {stored({h}, std::nullopt)}));
  EXPECT_TRUE(m.recording_truncated());
  EXPECT_EQ(m.recorded_batches(), 2u);
  EXPECT_EQ(m.recorded_events(), 4u);  // the third batch's half step was dropped
  EXPECT_EQ(m.totals().batches, 4);
  EXPECT_EQ(m.totals().live, 4);
  const Timeline t = m.build_timeline("capped");
  EXPECT_EQ(t.num_steps(), 2);
  EXPECT_EQ(t.header().num_blocks, 2);

  KvModelLimits few_batches;
  few_batches.max_recorded_batches = 3;
  KvEventModel n(few_batches);
  for (int i = 0; i < 10; ++i) n.apply(0, batch(i, {}));
  EXPECT_EQ(n.recorded_batches(), 3u);
  EXPECT_TRUE(n.recording_truncated());
}

TEST(KvEventModel, DepthPastThePoolIsClampedSoTheRecordingLoads) {
  // A chain deeper than the pool once its root is gone: depth 3 in a pool of 3 slots.
  KvEventModel m;
  m.apply(0, batch(1, {stored({1, 2}, std::nullopt)}));
  m.apply(0, batch(2, {stored({3}, 2), removed({1, 2})}));
  m.apply(0, batch(3, {stored({4}, 3)}));
  const Timeline t = m.build_timeline("deep");
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("kvscope_kv_event_model_" + std::to_string(::getpid()) + ".kvr"))
                               .string();
  t.save(path);
  const Timeline back = Timeline::load(path);
  std::filesystem::remove(path);
  ASSERT_EQ(back.num_steps(), t.num_steps());
  ASSERT_EQ(back.events().size(), t.events().size());
  for (std::size_t i = 0; i < t.events().size(); ++i) EXPECT_EQ(back.events()[i], t.events()[i]);
  for (const Event& e : back.events()) EXPECT_LT(e.logical, back.header().num_blocks);
  EXPECT_EQ(back.header().title, "deep");
}

TEST(KvEventModel, NothingStoredStillBuildsARecording) {
  KvEventModel m;
  const Timeline t = m.build_timeline("empty");
  EXPECT_EQ(t.num_steps(), 0);
  EXPECT_EQ(t.header().num_blocks, 1);
}

TEST(KvEventModel, ManyMediaNamesShareOneOtherBucket) {
  KvModelLimits limits;
  limits.max_media = 4;
  KvEventModel m(limits);
  for (int i = 0; i < 10; ++i)
    m.apply(0, batch(1, {stored({static_cast<std::uint64_t>(i)}, std::nullopt,
                                "TIER" + std::to_string(i))}));
  const auto media = m.live_by_medium();
  EXPECT_LE(media.size(), 4u);
  EXPECT_EQ(media.at("OTHER"), 8);
  EXPECT_EQ(m.totals().live, 10);
}

TEST(KvEventModel, RanksOutsideTheRangeAreRefused) {
  KvEventModel m;
  EXPECT_THROW(m.apply(-1, batch(1, {})), Error);
  EXPECT_THROW(m.restart(70000), Error);
}

KvStreamEvent with_lora(KvStreamEvent e, std::optional<std::int64_t> id, std::string name) {
  e.lora_id = id;
  e.lora_name = std::move(name);
  return e;
}

TEST(KvEventModel, LoraNamespacesCountTheirOwnBlocks) {
  KvEventModel m;
  m.apply(0, batch(1, {stored({1, 2}, std::nullopt),
                       with_lora(stored({3}, std::nullopt), 7, "sql-lora"),
                       with_lora(stored({4, 5}, std::nullopt), 9, "")}));
  m.apply(0, batch(2, {removed({4})}));
  const auto loras = m.by_lora();
  ASSERT_EQ(loras.size(), 3u);
  EXPECT_EQ(loras.at("base").live, 2);
  EXPECT_EQ(loras.at("sql-lora").live, 1);
  EXPECT_EQ(loras.at("sql-lora").stored, 1);
  EXPECT_EQ(loras.at("lora#9").live, 1);  // only an id came: named by it
  EXPECT_EQ(loras.at("lora#9").stored, 2);
  // A re-store under another adapter moves the block (the live total stays).
  m.apply(0, batch(3, {with_lora(stored({1}, std::nullopt), 7, "sql-lora")}));
  EXPECT_EQ(m.by_lora().at("base").live, 1);
  EXPECT_EQ(m.by_lora().at("sql-lora").live, 2);
  EXPECT_EQ(m.totals().live, 4);
}

TEST(KvEventModel, LoraNamesPastTheCapCountAsOther) {
  KvModelLimits limits;
  limits.max_loras = 4;  // base + 2 names + OTHER
  KvEventModel m(limits);
  for (std::uint64_t k = 0; k < 6; ++k)
    m.apply(0, batch(1, {with_lora(stored({k}, std::nullopt), std::nullopt,
                                   "adapter-" + std::to_string(k))}));
  const auto loras = m.by_lora();
  EXPECT_EQ(loras.size(), 4u);
  EXPECT_EQ(loras.at("OTHER").live, 4);
  EXPECT_EQ(loras.at("adapter-0").live, 1);
}

// A system prompt of three blocks shared by two conversations, one of which shares a deeper
// turn with a third: the deepest shared prefix is that turn, then the system prompt.
TEST(KvEventModel, DeepestSharedPrefixesAreBlocksWithTwoLiveContinuations) {
  KvEventModel m;
  m.apply(0, batch(1, {stored({1, 2, 3}, std::nullopt)}));     // system prompt
  m.apply(0, batch(2, {stored({10, 11}, 3)}));                 // conversation A
  m.apply(0, batch(3, {stored({20}, 3)}));                     // conversation B
  m.apply(0, batch(4, {stored({12}, 11), stored({13}, 11)}));  // A's turn, two continuations
  m.apply(1, batch(5, {stored({1, 2}, std::nullopt)}));        // rank 1: no branch
  std::vector<KvSharedPrefix> shared = m.deepest_shared_prefixes(8);
  ASSERT_EQ(shared.size(), 2u);
  EXPECT_EQ(shared[0].blocks, 5);  // 1 2 3 10 11
  EXPECT_EQ(shared[0].tokens, 80);
  EXPECT_EQ(shared[0].branches, 2);
  EXPECT_EQ(shared[1].blocks, 3);  // the system prompt: A and B
  EXPECT_EQ(shared[1].branches, 2);
  EXPECT_EQ(shared[1].rank, 0);
  EXPECT_EQ(shared[1].medium, "GPU");
  EXPECT_EQ(shared[1].lora, "base");
  EXPECT_TRUE(shared[0].complete);
  EXPECT_EQ(m.deepest_shared_prefixes(1).size(), 1u);
  // B goes: the system prompt has one continuation left.
  m.apply(0, batch(6, {removed({20})}));
  shared = m.deepest_shared_prefixes(8);
  ASSERT_EQ(shared.size(), 1u);
  EXPECT_EQ(shared[0].blocks, 5);
}

// A chain whose first blocks kvscope never saw (stored before attach): its length is a lower bound.
TEST(KvEventModel, APrefixWhoseAncestorsWereNeverSeenIsMarkedIncomplete) {
  KvEventModel m;
  m.apply(0, batch(1, {stored({50, 51}, 49)}));  // 49: stored before attach
  m.apply(0, batch(2, {stored({60}, 51), stored({61}, 51)}));
  const std::vector<KvSharedPrefix> shared = m.deepest_shared_prefixes(8);
  ASSERT_EQ(shared.size(), 1u);
  EXPECT_EQ(shared[0].blocks, 2);
  EXPECT_FALSE(shared[0].complete);
}

TEST(KvEventModel, AReusedSlotIsNotTheParentOfTheOldBlocksChildren) {
  KvEventModel m;
  m.apply(0, batch(1, {stored({1}, std::nullopt)}));
  m.apply(0, batch(2, {stored({2}, 1), stored({3}, 1)}));  // 1 has two children
  m.apply(0, batch(3, {removed({1})}));                    // its slot is free...
  m.apply(0, batch(4, {stored({4}, std::nullopt)}));       // ...and given to block 4
  EXPECT_TRUE(m.deepest_shared_prefixes(8).empty());       // 4 has no children
}

TEST(KvEventModel, LiveTimelineStepsEqualTheBuiltRecording) {
  KvModelLimits limits;
  limits.max_live_blocks = 64;
  KvEventModel m(limits);
  TimelineHeader h;
  h.num_blocks = 64;
  h.block_size = 16;
  Timeline live(h);
  std::size_t from = 0;
  for (std::uint64_t k = 0; k < 40; ++k) {
    std::vector<KvStreamEvent> evs = {
        stored({100 + k}, k > 0 ? std::optional(99 + k) : std::nullopt)};
    if (k % 3 == 2) evs.push_back(removed({100 + k - 2}));
    if (k == 30) evs.push_back(cleared());
    m.apply(static_cast<int>(k % 2), batch(static_cast<double>(k), std::move(evs)));
    if (k % 7 == 0) from = m.append_steps(live, from);  // appended in pieces, as the UI does
  }
  from = m.append_steps(live, from);
  EXPECT_EQ(from, 40u);
  const Timeline built = m.build_timeline("t");
  ASSERT_EQ(live.num_steps(), built.num_steps());
  ASSERT_EQ(live.num_events(), built.num_events());
  for (int s = 0; s < built.num_steps(); ++s) {
    EXPECT_EQ(live.metrics(s).blocks_cached_free, built.metrics(s).blocks_cached_free) << s;
    const PoolState a = live.state_at(s), b = built.state_at(s);
    for (std::size_t i = 0; i < b.blocks.size(); ++i)
      EXPECT_EQ(a.blocks[i].status, b.blocks[i].status) << "step " << s << " slot " << i;
  }
}

}  // namespace
}  // namespace kvscope

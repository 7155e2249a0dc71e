// KvEventModel::lookup ("why did my prefix miss?") on hand-built streams, one per reason, and the
// views the lookup rests on: clear scope, remote locality, placeholders matched by hash, groups.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/trace/kv_event_model.h"
#include "tests/trace/kv_event_builders.h"

namespace kvscope {
namespace {

constexpr int kBlock = 4;

// The prompt: ids 100, 101, ... (`n` of them).
std::vector<std::int64_t> prompt(std::size_t n, std::int64_t first = 100) {
  std::vector<std::int64_t> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = first + static_cast<std::int64_t>(i);
  return p;
}

// A BlockStored of `hashes` carrying tokens[from*kBlock ...) of `tokens`, one block per hash.
KvStreamEvent stored(std::vector<std::uint64_t> hashes, std::optional<std::uint64_t> parent,
                     const std::vector<std::int64_t>& tokens, std::size_t from_block,
                     std::string medium = "") {
  KvStreamEvent e;
  e.kind = KvEventKind::kBlockStored;
  e.block_hashes = std::move(hashes);
  e.parent_hash = parent;
  e.block_size = kBlock;
  e.num_token_ids = static_cast<std::int64_t>(e.block_hashes.size()) * kBlock;
  for (std::size_t b = 0; b < e.block_hashes.size(); ++b)
    e.block_tokens.push_back(
        kv_token_fingerprint(tokens.data() + (from_block + b) * kBlock, kBlock));
  e.medium = std::move(medium);
  return e;
}

// An offload tier's placeholder store: hashes only.
KvStreamEvent placeholder(std::vector<std::uint64_t> hashes, std::string medium) {
  KvStreamEvent e;
  e.kind = KvEventKind::kBlockStored;
  e.block_hashes = std::move(hashes);
  e.medium = std::move(medium);
  return e;
}

using test::batch;
using test::cleared;
using test::removed;

const KvLookupRow& row(const std::vector<KvLookupRow>& rows, int rank, const std::string& medium) {
  for (const KvLookupRow& r : rows)
    if (r.rank == rank && r.medium == medium) return r;
  ADD_FAILURE() << "no row for rank " << rank << " " << medium;
  static const KvLookupRow none;
  return none;
}

TEST(KvLookup, EveryFullBlockHeldAndTheTailNamed) {
  const auto p = prompt(10);  // 2 full blocks of 4, 2 tokens over
  KvEventModel m;
  m.apply(0, batch(1, {stored({1, 2}, std::nullopt, p, 0)}), 0);
  const auto rows = m.lookup({p});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].reason, KvMissReason::kAllHeld);
  EXPECT_EQ(rows[0].prompt_blocks, 2);
  EXPECT_EQ(rows[0].matched_blocks, 2);
  EXPECT_EQ(rows[0].matched_tokens, 8);
  EXPECT_EQ(kv_lookup_text(rows[0], 1.0),
            "2 of 2 blocks held (8 of 10 tokens); the last 2 tokens fill less than a block "
            "(engines cache full blocks only)");
}

TEST(KvLookup, APromptShorterThanOneBlock) {
  const auto p = prompt(8);
  KvEventModel m;
  m.apply(0, batch(1, {stored({1}, std::nullopt, p, 0)}), 0);
  const auto rows = m.lookup({prompt(3)});
  EXPECT_EQ(rows[0].reason, KvMissReason::kShorterThanBlock);
  EXPECT_EQ(kv_lookup_text(rows[0], 1.0),
            "the prompt's 3 tokens fill less than one 4-token block: engines cache full blocks "
            "only");
}

TEST(KvLookup, TheMatchStopsWhereTheTokensDifferAndNowhereElse) {
  const auto p = prompt(12);
  auto other = p;
  other[6] = 7;  // block 2 differs (tokens 4..7)
  KvEventModel m;
  m.apply(0, batch(1, {stored({1, 2, 3}, std::nullopt, other, 0)}), 0);
  const auto rows = m.lookup({p});
  EXPECT_EQ(rows[0].matched_blocks, 1);
  EXPECT_EQ(rows[0].reason, KvMissReason::kNeverStored);
  EXPECT_EQ(kv_lookup_text(rows[0], 1.0),
            "1 of 3 blocks held (4 of 12 tokens); block 2 was never stored since kvscope attached");
  // Block 3's tokens equal the prompt's, but under another parent: no match past block 2.
  EXPECT_EQ(m.lookup({p})[0].matched_blocks, 1);
}

TEST(KvLookup, ARemovedBlockNamesItsBatchAndHow) {
  const auto p = prompt(12);
  KvEventModel m;
  m.apply(0, batch(10.0, {stored({1, 2, 3}, std::nullopt, p, 0)}), 4);
  m.apply(0, batch(12.5, {removed({3, 2})}), 17);
  m.apply(0, batch(14.0, {}), 18);
  const auto rows = m.lookup({p});
  EXPECT_EQ(rows[0].matched_blocks, 1);
  EXPECT_EQ(rows[0].reason, KvMissReason::kRemoved);
  EXPECT_EQ(rows[0].removed_seq, 17);
  EXPECT_EQ(rows[0].removed_by, "BlockRemoved");
  EXPECT_EQ(kv_lookup_text(rows[0], m.last_ts()),
            "1 of 3 blocks held (4 of 12 tokens); block 2 was stored, then dropped by "
            "BlockRemoved in batch 17, 1.5 s before the last batch");
  // Stored again: held again.
  m.apply(0, batch(15.0, {stored({2, 3}, 1, p, 1)}), 19);
  EXPECT_EQ(m.lookup({p})[0].reason, KvMissReason::kAllHeld);
}

TEST(KvLookup, ClearsAndRestartsAreRemovalsToo) {
  const auto p = prompt(8);
  KvEventModel m;
  m.apply(0, batch(1, {stored({1, 2}, std::nullopt, p, 0)}), 0);
  m.apply(0, batch(2, {cleared()}), 1);
  EXPECT_EQ(m.lookup({p})[0].removed_by, "AllBlocksCleared");
  m.apply(0, batch(3, {stored({1, 2}, std::nullopt, p, 0)}), 2);
  m.restart(0);
  const auto rows = m.lookup({p});
  EXPECT_EQ(rows[0].reason, KvMissReason::kRemoved);
  EXPECT_EQ(rows[0].removed_by, "a restart");
  EXPECT_EQ(rows[0].removed_seq, -1);
}

TEST(KvLookup, AnotherLoraOrExtraKeysIsAnotherNamespace) {
  const auto p = prompt(8);
  KvEventModel m;
  KvStreamEvent lora = stored({1, 2}, std::nullopt, p, 0);
  lora.lora_name = "sql-adapter";
  m.apply(0, batch(1, {lora}), 0);
  auto rows = m.lookup({p});
  EXPECT_EQ(rows[0].matched_blocks, 0);
  EXPECT_EQ(rows[0].reason, KvMissReason::kOtherNamespace);
  EXPECT_EQ(rows[0].other_namespace, "LoRA 'sql-adapter'");
  // Asked with that adapter: held.
  EXPECT_EQ(m.lookup({p, "sql-adapter"})[0].reason, KvMissReason::kAllHeld);

  KvEventModel x;
  KvStreamEvent image = stored({1, 2}, std::nullopt, p, 0);
  image.block_extra = {0, 0xabc};  // block 2 has an image in it
  x.apply(0, batch(1, {image}), 0);
  rows = x.lookup({p});
  EXPECT_EQ(rows[0].matched_blocks, 1);
  EXPECT_EQ(rows[0].reason, KvMissReason::kOtherNamespace);
  EXPECT_NE(rows[0].other_namespace.find("extra keys"), std::string::npos);
  // SGLang's cache_salt namespaces every block.
  KvEventModel salted;
  KvStreamEvent salt = stored({1, 2}, std::nullopt, p, 0);
  salt.cache_salt = "tenant-a";
  salted.apply(0, batch(1, {salt}), 0);
  EXPECT_EQ(salted.lookup({p})[0].reason, KvMissReason::kOtherNamespace);
}

TEST(KvLookup, AChainBegunBeforeAttachIsSaidSo) {
  const auto p = prompt(12);
  KvEventModel m;
  // Block 1 (hash 1) was stored before attach; kvscope sees blocks 2 and 3 under parent 1.
  m.apply(0, batch(1, {stored({2, 3}, 1, p, 1)}), 40);
  const auto rows = m.lookup({p});
  EXPECT_EQ(rows[0].matched_blocks, 0);
  EXPECT_EQ(rows[0].reason, KvMissReason::kChainBeforeAttach);
}

TEST(KvLookup, RanksAndMediaGetARowEachAndPlaceholdersMatchByHash) {
  const auto p = prompt(12);
  KvEventModel m;
  m.apply(0, batch(1, {stored({1, 2, 3}, std::nullopt, p, 0), placeholder({1, 2, 3}, "CPU")}), 0);
  m.apply(1, batch(1, {stored({1}, std::nullopt, p, 0)}), 0);
  // The GPU drops blocks 2 and 3; the CPU tier still has them (its hashes come from history).
  m.apply(0, batch(2, {removed({3, 2})}), 1);
  auto rows = m.lookup({p});
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(row(rows, 0, "GPU").matched_blocks, 1);
  EXPECT_EQ(row(rows, 0, "GPU").reason, KvMissReason::kRemoved);
  const KvLookupRow& cpu = row(rows, 0, "CPU");
  EXPECT_TRUE(cpu.by_hash);
  EXPECT_EQ(cpu.matched_blocks, 3);
  EXPECT_EQ(cpu.reason, KvMissReason::kAllHeld);
  EXPECT_EQ(row(rows, 1, "GPU").matched_blocks, 1);
  EXPECT_EQ(row(rows, 1, "GPU").reason, KvMissReason::kNeverStored);
  // The CPU tier drops block 3: by hash, removed.
  m.apply(0, batch(3, {removed({3}, "CPU")}), 2);
  rows = m.lookup({p});
  EXPECT_EQ(row(rows, 0, "CPU").matched_blocks, 2);
  EXPECT_EQ(row(rows, 0, "CPU").reason, KvMissReason::kRemoved);
}

// A tier that stores copies with their tokens (SGLang's HiCache) is a medium of its own: what it
// holds never answers for the GPU's row (the GPU is medium 0: its scope must not be the "any
// medium" one the placeholder rows use; found on SGLang 0.5.23's recorded stream).
TEST(KvLookup, ATierWithTokensNeverAnswersForTheGpu) {
  const auto p = prompt(8);
  KvEventModel m;
  m.apply(0, batch(1, {stored({1, 2}, std::nullopt, p, 0)}), 0);
  m.apply(0, batch(2, {stored({1, 2}, std::nullopt, p, 0, "CPU_PINNED")}), 1);
  m.apply(0, batch(3, {removed({2})}), 2);
  const auto rows = m.lookup({p});
  EXPECT_EQ(row(rows, 0, "GPU").matched_blocks, 1);
  EXPECT_EQ(row(rows, 0, "GPU").reason, KvMissReason::kRemoved);
  EXPECT_EQ(row(rows, 0, "GPU").removed_seq, 2);
  EXPECT_EQ(row(rows, 0, "CPU_PINNED").matched_blocks, 2);
  // A block the GPU never held in the request's namespace is never_stored there, whatever a
  // tier did with its copy.
  KvEventModel salted;
  KvStreamEvent salt = stored({5}, std::nullopt, p, 0);
  salt.cache_salt = "tenant-a";
  salted.apply(0, batch(1, {salt, stored({5}, std::nullopt, p, 0, "DISK")}), 0);
  salted.apply(0, batch(2, {removed({5}, "DISK")}), 1);
  const auto srows = salted.lookup({prompt(4)});
  EXPECT_EQ(row(srows, 0, "GPU").reason, KvMissReason::kOtherNamespace);
  EXPECT_EQ(row(srows, 0, "DISK").reason, KvMissReason::kRemoved);
}

TEST(KvLookup, PlaceholdersWithNoTokenTierHaveNoKnownHashes) {
  KvEventModel m;
  m.apply(0, batch(1, {placeholder({1, 2}, "STORAGE")}), 0);
  const auto rows = m.lookup({prompt(8)});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].reason, KvMissReason::kNoTokens);
  EXPECT_EQ(m.totals().placeholders, 2);
}

TEST(KvEventModelViews, RemoteBlocksAreAMediumOfTheirOwn) {
  const auto p = prompt(8);
  KvEventModel m;
  KvStreamEvent remote = stored({1, 2}, std::nullopt, p, 0);
  remote.locality = "REMOTE";
  KvStreamEvent local = stored({1}, std::nullopt, p, 0);
  local.locality = "LOCAL";
  m.apply(0, batch(1, {remote, local}), 0);
  EXPECT_EQ(m.live_by_medium(),
            (std::map<std::string, std::int64_t>{{"GPU", 1}, {"GPU (remote)", 2}}));
  KvStreamEvent gone = removed({2});
  gone.locality = "REMOTE";
  m.apply(0, batch(2, {gone}), 1);
  EXPECT_EQ(m.live_by_medium(),
            (std::map<std::string, std::int64_t>{{"GPU", 1}, {"GPU (remote)", 1}}));
  EXPECT_EQ(m.totals().unknown_removals, 0);
}

TEST(KvEventModelViews, ClearScopeFollowsTheEngineOrTheUser) {
  const auto p = prompt(8);
  auto run = [&](KvClearScope scope, const std::string& cpu_medium) {
    KvEventModel m;
    m.set_clear_scope(scope);
    m.apply(0, batch(1, {stored({1}, std::nullopt, p, 0), placeholder({1}, cpu_medium)}), 0);
    m.apply(0, batch(2, {cleared()}), 1);
    return m;
  };
  // vLLM (medium "CPU"): its clear comes from the GPU pool; the CPU tier keeps its block.
  KvEventModel v = run(KvClearScope::kAuto, "CPU");
  EXPECT_EQ(v.engine_guess(), KvEngineGuess::kVllm);
  EXPECT_EQ(v.live_by_medium(), (std::map<std::string, std::int64_t>{{"CPU", 1}}));
  EXPECT_EQ(v.totals().clears_gpu_only, 1);
  // SGLang (medium "CPU_PINNED"): every tier.
  KvEventModel s = run(KvClearScope::kAuto, "CPU_PINNED");
  EXPECT_EQ(s.engine_guess(), KvEngineGuess::kSglang);
  EXPECT_TRUE(s.live_by_medium().empty());
  EXPECT_EQ(s.totals().clears_all, 1);
  // The user's word wins.
  EXPECT_TRUE(run(KvClearScope::kAll, "CPU").live_by_medium().empty());
  EXPECT_EQ(run(KvClearScope::kGpu, "CPU_PINNED").live_by_medium().size(), 1u);
}

TEST(KvEventModelViews, GroupsKeepTheirKindWindowAndBlockSize) {
  const auto p = prompt(8);
  KvEventModel m;
  KvStreamEvent full = stored({1, 2}, std::nullopt, p, 0);
  full.spec_kind = "full_attention";
  KvStreamEvent window = stored({1}, std::nullopt, p, 0);
  window.group_idx = 1;
  window.spec_kind = "sliding_window";
  window.sliding_window = 4096;
  window.block_size = 528;  // a hybrid model's attention block, inflated to the Mamba page
  window.block_tokens.clear();
  window.num_token_ids = 0;
  m.apply(0, batch(1, {full, window}), 0);
  ASSERT_EQ(m.groups().size(), 2u);
  EXPECT_EQ(m.groups().at(0).spec_kind, "full_attention");
  EXPECT_EQ(m.groups().at(0).live, 2);
  EXPECT_EQ(m.groups().at(1).sliding_window, 4096);
  EXPECT_EQ(m.groups().at(1).block_size, 528);
  // The recording the Block pool draws: group 1's block is in group 1, a sliding window of 4,096.
  const PoolState pool = m.build_timeline("t").state_at(0);
  ASSERT_EQ(pool.groups.size(), 2u);
  EXPECT_EQ(pool.groups[1], (LayerGroupSeen{1, 4096}));
  int in_group[2] = {0, 0};
  for (const BlockState& b : pool.blocks)
    if (b.status != BlockStatus::kFree) ++in_group[b.group];
  EXPECT_EQ(in_group[0], 2);
  EXPECT_EQ(in_group[1], 1);
  m.apply(0, batch(2, {removed({1})}), 1);
  EXPECT_EQ(m.groups().at(0).live, 1);
  EXPECT_EQ(m.groups().at(1).live, 1);  // group 1's block 1 is another block
}

TEST(KvLookup, TheHistoryIsBounded) {
  const auto p = prompt(8);
  KvModelLimits limits;
  limits.max_history = 2;
  KvEventModel m(limits);
  for (std::uint64_t h = 1; h <= 5; ++h) {
    m.apply(0, batch(1, {stored({h}, std::nullopt, p, 0)}), 0);
    m.apply(0, batch(2, {removed({h})}), static_cast<std::int64_t>(h));
  }
  // Only the last two removals are remembered: the latest is what the lookup names.
  EXPECT_EQ(m.lookup({p})[0].removed_seq, 5);
}

}  // namespace
}  // namespace kvscope

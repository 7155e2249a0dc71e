// PrefixCache tests: every miss reason, eviction order per policy, pinning, dedup on insert,
// fork + copy-on-write, events and metrics.
#include <gtest/gtest.h>

#include "engine/prefix/prefix_cache.h"

namespace kvscope {
namespace {

struct VectorSink : EventSink {
  std::vector<Event> events;
  void emit(const Event& e) override { events.push_back(e); }
  int count(EventType t) const {
    int n = 0;
    for (const Event& e : events) n += e.type == t;
    return n;
  }
};

// Tokens of "block word" w: block_size tokens unique to w.
std::vector<TokenId> prompt_of(std::initializer_list<int> words, int bs, int extra = 1) {
  std::vector<TokenId> out;
  for (int w : words) {
    for (int t = 0; t < bs; ++t) out.push_back(w * 100 + t);
  }
  for (int t = 0; t < extra; ++t) out.push_back(99);  // a partial last block (always computed)
  return out;
}

// Admits a prompt like a scheduler would: lookup, allocate the rest, cache the full blocks.
struct Harness {
  BlockPool pool;
  VectorSink sink;
  PrefixCache cache;
  Harness(int blocks, IndexKind kind, EvictionPolicyKind policy = EvictionPolicyKind::kLru,
          int bs = 4)
      : pool(blocks), cache(pool, PrefixCacheConfig{bs, kind, policy, true, nullptr}, &sink) {}
  std::vector<BlockId> admit(int request, const std::vector<TokenId>& prompt,
                             PrefixLookupResult* out = nullptr) {
    PrefixLookupResult r = cache.lookup_and_acquire(request, prompt);
    std::vector<BlockId> table = r.blocks;
    const std::size_t need = (prompt.size() + 3) / 4;
    while (table.size() < need) table.push_back(*cache.allocate());
    cache.insert(request, prompt, table);
    cache.check_invariants();
    if (out) *out = r;
    return table;
  }
};

class PrefixCacheTest : public ::testing::TestWithParam<IndexKind> {};

TEST_P(PrefixCacheTest, MissReasons) {
  Harness h(64, GetParam());
  PrefixLookupResult r;
  h.admit(0, prompt_of({1, 2, 3}, 4), &r);
  EXPECT_EQ(r.reason, MissReason::kFirstOccurrence);
  EXPECT_EQ(r.hit_tokens, 0);
  h.admit(1, prompt_of({1, 2, 3}, 4), &r);
  EXPECT_EQ(r.reason, MissReason::kNone);
  EXPECT_EQ(r.hit_tokens, 12);
  h.admit(2, prompt_of({1, 2, 7}, 4), &r);
  EXPECT_EQ(r.reason, MissReason::kDiverged);
  EXPECT_EQ(r.diverged_at, 8);
  h.admit(3, std::vector<TokenId>{5, 6, 7, 8},
          &r);  // one block exactly: the last token is computed
  EXPECT_EQ(r.reason, MissReason::kShorterThanBlock);
  // A prompt with the same first two tokens as word 1, then different: radix sees token 2.
  h.admit(4, std::vector<TokenId>{100, 101, 0, 0, 0}, &r);
  if (GetParam() == IndexKind::kRadix) {
    EXPECT_EQ(r.reason, MissReason::kDiverged);
    EXPECT_EQ(r.diverged_at, 2);
  } else {
    EXPECT_EQ(r.reason, MissReason::kFirstOccurrence);
  }
  EXPECT_EQ(h.cache.metrics().lookups_by_reason[static_cast<int>(MissReason::kDiverged)],
            GetParam() == IndexKind::kRadix ? 2 : 1);
}

TEST_P(PrefixCacheTest, EvictedEarlierNamesTheStep) {
  Harness h(4, GetParam());  // room for one 4-block prompt
  auto t = h.admit(0, prompt_of({1, 2, 3}, 4));
  h.cache.release(t);
  EXPECT_EQ(h.cache.num_evictable(), 3);
  h.cache.set_step(17);
  t = h.admit(1, prompt_of({4, 5, 6}, 4));  // needs all 4 blocks: evicts 1,2,3
  EXPECT_EQ(h.cache.metrics().evictions, 3);
  h.cache.release(t);
  h.cache.set_step(30);
  PrefixLookupResult r;
  h.admit(2, prompt_of({1, 2, 3}, 4), &r);
  EXPECT_EQ(r.reason, MissReason::kEvicted);
  EXPECT_EQ(r.evicted_at_step, 17);
  bool found = false;
  for (const Event& ev : h.sink.events) {
    if (ev.type == EventType::kPrefixLookup && ev.request == 2) {
      found = true;
      EXPECT_EQ(event_as<ev::PrefixLookup>(ev).reason, MissReason::kEvicted);
      EXPECT_EQ(event_as<ev::PrefixLookup>(ev).evicted_at_step, 17);
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(h.sink.count(EventType::kCachedBlockEvicted), 6);  // 1,2,3 then 4,5,6
}

TEST_P(PrefixCacheTest, DisabledCachesNothing) {
  BlockPool pool(16);
  PrefixCache cache(pool,
                    PrefixCacheConfig{4, GetParam(), EvictionPolicyKind::kLru, false, nullptr});
  auto p = prompt_of({1, 2}, 4);
  std::vector<BlockId> t;
  for (int i = 0; i < 3; ++i) t.push_back(*cache.allocate());
  cache.insert(0, p, t);
  EXPECT_EQ(cache.lookup_and_acquire(1, p).reason, MissReason::kDisabled);
  EXPECT_EQ(cache.num_cached(), 0);
  cache.release(t);
  EXPECT_EQ(pool.num_free(), 16);
}

// Caches three one-block prompts (A, B, C), touches them per `touch`, frees all, then asks for
// blocks until all three are gone; returns the order they were evicted in (word numbers).
std::vector<int> eviction_order(EvictionPolicyKind policy, IndexKind kind,
                                const std::vector<int>& touch, int pinned_word = -1) {
  Harness h(3, kind, policy);
  const std::vector<int> words = {1, 2, 3};
  for (int w : words) h.cache.release(h.admit(w, prompt_of({w}, 4, 0)));
  for (int w : touch) {
    auto p = prompt_of({w}, 4, 1);
    auto r = h.cache.lookup_and_acquire(10 + w, p);
    h.cache.release(r.blocks);
  }
  if (pinned_word >= 0) h.cache.pin(prompt_of({pinned_word}, 4, 0));
  std::vector<int> order;
  std::vector<BlockId> held;
  while (auto b = h.cache.allocate()) {
    held.push_back(*b);
    h.cache.check_invariants();
  }
  for (const Event& e : h.sink.events) {
    if (e.type == EventType::kCachedBlockEvicted) order.push_back(static_cast<int>(e.a));
  }
  return order;  // cached_by == the word, since request id = word
}

TEST_P(PrefixCacheTest, EvictionOrderPerPolicy) {
  // Touch order: 1, 1, 2 (so 3 is least recent, 2 most recent; 1 most frequent).
  const std::vector<int> touch = {1, 1, 2};
  EXPECT_EQ(eviction_order(EvictionPolicyKind::kLru, GetParam(), touch),
            (std::vector<int>{3, 1, 2}));
  EXPECT_EQ(eviction_order(EvictionPolicyKind::kLfu, GetParam(), touch),
            (std::vector<int>{3, 2, 1}));
  EXPECT_EQ(eviction_order(EvictionPolicyKind::kFifo, GetParam(), touch),
            (std::vector<int>{1, 2, 3}));
  // Pinned blocks are never evicted: the allocation fails instead.
  EXPECT_EQ(eviction_order(EvictionPolicyKind::kLru, GetParam(), touch, 3),
            (std::vector<int>{1, 2}));
}

TEST_P(PrefixCacheTest, OnlyLeavesAreEvicted) {
  Harness h(5, GetParam());
  h.cache.release(h.admit(0, prompt_of({1, 2}, 4, 0)));  // chain 1 -> 2
  h.cache.release(h.admit(1, prompt_of({3}, 4, 0)));
  // LRU would pick block "1" (oldest) but it has a cached child: its leaf "2" goes first.
  std::vector<int> evicted_blocks;
  std::vector<BlockId> held;
  while (auto b = h.cache.allocate()) held.push_back(*b);
  for (const Event& e : h.sink.events) {
    if (e.type == EventType::kCachedBlockEvicted) evicted_blocks.push_back(e.block);
  }
  EXPECT_EQ(evicted_blocks, (std::vector<int>{1, 0, 2}));
}

TEST_P(PrefixCacheTest, InsertDeduplicatesABlockComputedTwice) {
  Harness h(16, GetParam());
  auto p = prompt_of({1, 2}, 4);
  // Two requests miss concurrently (both look up before either inserts).
  auto r0 = h.cache.lookup_and_acquire(0, p);
  auto r1 = h.cache.lookup_and_acquire(1, p);
  std::vector<BlockId> t0, t1;
  for (int i = 0; i < 3; ++i) t0.push_back(*h.cache.allocate());
  for (int i = 0; i < 3; ++i) t1.push_back(*h.cache.allocate());
  h.cache.insert(0, p, t0);
  h.cache.insert(1, p, t1);
  EXPECT_EQ(t1[0], t0[0]);
  EXPECT_EQ(t1[1], t0[1]);
  EXPECT_NE(t1[2], t0[2]);  // the partial block stays private
  EXPECT_EQ(h.cache.metrics().deduplicated_blocks, 2);
  EXPECT_EQ(h.pool.num_used(), 4);
  EXPECT_EQ(h.cache.metrics().blocks_saved, 2);
  h.cache.check_invariants();
  h.cache.release(t0);
  h.cache.release(t1);
  EXPECT_EQ(h.cache.num_evictable(), 2);
  h.cache.check_invariants();
}

TEST_P(PrefixCacheTest, ForkAndCopyOnWrite) {
  Harness h(16, GetParam());
  auto p = prompt_of({1, 2}, 4, 2);  // 2 full blocks + a half-filled third
  auto parent = h.admit(0, p);
  std::vector<BlockId> child = parent;
  h.cache.fork(1, child);
  EXPECT_EQ(h.cache.sequence_refs(parent[2]), 2);
  EXPECT_EQ(h.cache.metrics().blocks_saved, 3);
  // The child writes its next token into the shared partial block: it gets its own copy.
  WriteAccess w = h.cache.prepare_write(1, child, 2);
  EXPECT_TRUE(w.needs_copy);
  EXPECT_EQ(w.src, parent[2]);
  EXPECT_EQ(child[2], w.dst);
  EXPECT_EQ(h.cache.sequence_refs(parent[2]), 1);
  // The parent now owns its partial block alone: writes in place.
  EXPECT_FALSE(h.cache.prepare_write(0, parent, 2).needs_copy);
  // Writing into a cached full block would corrupt the cache: it is copied too.
  EXPECT_TRUE(h.cache.prepare_write(0, parent, 1).needs_copy);
  EXPECT_EQ(h.sink.count(EventType::kBlockCopiedOnWrite), 2);
  h.cache.check_invariants();
  h.cache.release(parent);
  h.cache.release(child);
  EXPECT_EQ(h.cache.metrics().blocks_saved, 0);
  h.cache.check_invariants();
}

TEST_P(PrefixCacheTest, CopyOnWriteWithNoFreeBlockLeavesTheTable) {
  Harness h(3, GetParam());
  auto t = h.admit(0, prompt_of({1, 2}, 4, 2));
  std::vector<BlockId> child = t;
  h.cache.fork(1, child);
  WriteAccess w = h.cache.prepare_write(1, child, 2);
  EXPECT_TRUE(w.out_of_blocks);
  EXPECT_EQ(child, t);
  h.cache.check_invariants();
}

TEST_P(PrefixCacheTest, MetricsAndEvents) {
  Harness h(32, GetParam());
  auto a = h.admit(0, prompt_of({1, 2, 3}, 4));  // 13 tokens, 3 full blocks
  auto b = h.admit(1, prompt_of({1, 2, 4}, 4));  // hits 2 blocks
  const PrefixCacheMetrics& m = h.cache.metrics();
  EXPECT_EQ(m.prompt_tokens, 26);
  EXPECT_EQ(m.hit_tokens, 8);
  EXPECT_EQ(m.prompt_blocks, 6);
  EXPECT_EQ(m.hit_blocks, 2);
  EXPECT_DOUBLE_EQ(m.token_hit_rate(), 8.0 / 26.0);
  EXPECT_DOUBLE_EQ(m.block_hit_rate(), 2.0 / 6.0);
  EXPECT_EQ(m.blocks_saved, 2);
  EXPECT_EQ(h.sink.count(EventType::kPrefixLookup), 2);
  EXPECT_EQ(h.sink.count(EventType::kBlockShared), 2);
  EXPECT_EQ(h.pool.ref_count(a[0]), 3);  // two sequences + the cache
  h.cache.release(a);
  h.cache.release(b);
  EXPECT_EQ(h.cache.metrics().peak_blocks_saved, 2);
  EXPECT_EQ(h.cache.num_allocatable(), 32 - 0);  // everything free or evictable
  EXPECT_EQ(h.cache.pin(prompt_of({1, 2}, 4, 0)), 2);
  EXPECT_EQ(h.sink.count(EventType::kBlockPinned), 2);
  EXPECT_EQ(h.cache.num_allocatable(), 30);
  EXPECT_EQ(h.cache.unpin(prompt_of({1, 2}, 4, 0)), 2);
  h.cache.check_invariants();
}

INSTANTIATE_TEST_SUITE_P(BothIndexes, PrefixCacheTest,
                         ::testing::Values(IndexKind::kHashChain, IndexKind::kRadix),
                         [](const auto& p) { return std::string(index_kind_name(p.param)); });

}  // namespace
}  // namespace kvscope

// Randomized operation sequences on PrefixCache (both indexes, every policy, a small pool):
// after every operation the invariant checker must pass, and references must balance at the end.
#include <gtest/gtest.h>

#include <random>

#include "engine/prefix/prefix_cache.h"

namespace kvscope {
namespace {

struct Seq {
  std::int32_t id;
  std::vector<TokenId> tokens;
  std::vector<BlockId> table;
};

void run_random(IndexKind kind, EvictionPolicyKind policy, unsigned seed) {
  constexpr int kBs = 3;
  BlockPool pool(24);
  PrefixCache cache(pool, PrefixCacheConfig{kBs, kind, policy, true, nullptr});
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  std::vector<Seq> live;
  std::int32_t next_id = 0;
  for (int op = 0; op < 1500; ++op) {
    const int what = pick(10);
    if (what < 4) {  // admit: prompts from a 3-token alphabet, so prefixes collide often
      Seq s{next_id++, {}, {}};
      const int len = 1 + pick(14);
      for (int i = 0; i < len; ++i) s.tokens.push_back(pick(i < 6 ? 2 : 3));
      PrefixLookupResult r = cache.lookup_and_acquire(s.id, s.tokens);
      s.table = r.blocks;
      const auto need = static_cast<std::size_t>((len + kBs - 1) / kBs);
      bool ok = true;
      while (s.table.size() < need) {
        auto b = cache.allocate();
        if (!b) {
          ok = false;
          break;
        }
        s.table.push_back(*b);
      }
      if (!ok) {
        cache.release(s.table);  // no room: give back what it holds
      } else {
        cache.insert(s.id, s.tokens, s.table);
        live.push_back(std::move(s));
      }
    } else if (what < 7 && !live.empty()) {  // finish
      const int i = pick(static_cast<int>(live.size()));
      cache.release(live[static_cast<std::size_t>(i)].table);
      live.erase(live.begin() + i);
    } else if (what == 7 && !live.empty()) {  // fork, then the child writes its last block
      Seq c = live[static_cast<std::size_t>(pick(static_cast<int>(live.size())))];
      c.id = next_id++;
      cache.fork(c.id, c.table);
      const WriteAccess w =
          cache.prepare_write(c.id, c.table, static_cast<int>(c.table.size()) - 1);
      if (w.needs_copy) {
        ASSERT_NE(w.src, w.dst);
        // The copy is private; the sequence now diverges from what is cached.
        c.tokens.resize((c.table.size() - 1) * kBs);
      }
      live.push_back(std::move(c));
    } else if (what == 8 && !live.empty()) {  // pin or unpin a live prompt's prefix
      const auto& s = live[static_cast<std::size_t>(pick(static_cast<int>(live.size())))];
      if (pick(2)) {
        cache.pin(s.tokens);
      } else {
        cache.unpin(s.tokens);
      }
    } else {  // a bare allocation that is freed at once
      if (auto b = cache.allocate()) cache.release(std::vector<BlockId>{*b});
    }
    ASSERT_NO_THROW(cache.check_invariants()) << "op " << op;
    for (const Seq& s : live) {
      for (BlockId b : s.table)
        ASSERT_FALSE(pool.is_free(b)) << "a held block was freed, op " << op;
    }
  }
  for (const Seq& s : live) cache.release(s.table);
  cache.check_invariants();
  EXPECT_EQ(cache.metrics().blocks_saved, 0);
  EXPECT_EQ(pool.num_free() + cache.num_cached(), pool.num_blocks());  // only the cache holds refs
  EXPECT_GT(cache.metrics().hit_blocks, 0);
  EXPECT_GT(cache.metrics().evictions, 0);
}

TEST(PrefixCacheRandom, InvariantsHoldUnderRandomOperations) {
  for (IndexKind kind : {IndexKind::kHashChain, IndexKind::kRadix}) {
    for (EvictionPolicyKind policy :
         {EvictionPolicyKind::kLru, EvictionPolicyKind::kLfu, EvictionPolicyKind::kFifo}) {
      for (unsigned seed : {1u, 2u, 3u}) {
        SCOPED_TRACE(std::string(index_kind_name(kind)) + " " +
                     std::string(eviction_policy_name(policy)) + " seed " + std::to_string(seed));
        run_random(kind, policy, seed);
      }
    }
  }
}

}  // namespace
}  // namespace kvscope

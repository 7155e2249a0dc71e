// Randomized operation sequences on KvCacheManager (about a million allocate/append/free/preempt
// operations over both allocators) against a shadow model, with invariants checked per batch.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine/analysis/pool_metrics.h"
#include "engine/kv/cache_manager.h"

namespace kvscope {
namespace {

void fuzz(AllocatorKind kind, int ops, std::uint32_t seed) {
  constexpr int kBlockSize = 16, kBlocks = 128, kMaxSeqLen = 256;
  KvLayout layout{1, 1, 4, kBlockSize, kBlocks, {}, {}};
  KvCacheManager cache(layout, kind, kMaxSeqLen, /*with_storage=*/false);
  std::mt19937 rng(seed);
  std::map<int, int> shadow;  // live sequence -> tokens
  int next_id = 0;
  long appended = 0, refused = 0;
  for (int op = 1; op <= ops; ++op) {
    const int r = static_cast<int>(rng() % 100);
    if ((r < 15 && shadow.size() < 48) || shadow.empty()) {  // allocate: a new sequence
      const bool ok = cache.add_sequence(SeqId(next_id));
      if (ok) shadow[next_id] = 0;
      ++next_id;
    } else {
      auto it = shadow.begin();
      std::advance(it, static_cast<long>(rng() % shadow.size()));
      const SeqId id(it->first);
      if (r < 80) {  // append 1..24 tokens (mostly decode-sized)
        const int n = r < 60 ? 1 : 1 + static_cast<int>(rng() % 24);
        const int free_before = cache.pool().num_free();
        const int need = cache.blocks_needed(id, n);
        const bool fits =
            it->second + n <= (kind == AllocatorKind::kContiguous ? kMaxSeqLen : 1 << 30) &&
            need <= free_before;
        ASSERT_EQ(cache.append_slots(id, n), fits) << "op " << op;
        if (fits) {
          it->second += n;
          ++appended;
          ASSERT_EQ(cache.pool().num_free(), free_before - need);
        } else {
          ++refused;
        }
      } else if (r < 85) {  // free (finish)
        cache.free_sequence(id);
        shadow.erase(it);
      } else {  // preempt by recompute: free, re-admit, re-append what it had
        const int tokens = it->second;
        cache.free_sequence(id);
        ASSERT_TRUE(cache.add_sequence(id)) << "op " << op << ": freed room must be re-admittable";
        ASSERT_TRUE(cache.append_slots(id, tokens)) << "op " << op;
      }
    }
    if (op % 2000 == 0) {
      ASSERT_NO_THROW(cache.check_invariants()) << "op " << op;
      long tokens = 0, blocks = 0;
      for (const auto& [id, n] : shadow) {
        ASSERT_EQ(cache.table(SeqId(id)).num_tokens, n);
        tokens += n;
        blocks +=
            kind == AllocatorKind::kPaged ? cache.blocks_for(n) : cache.blocks_for(kMaxSeqLen);
      }
      ASSERT_EQ(cache.pool().num_used(), blocks) << "op " << op;
      StepMetrics m;
      fill_pool_metrics(cache, m);
      ASSERT_EQ(m.slots_filled, tokens);
      ASSERT_EQ(m.slots_allocated,
                m.slots_filled + m.internal_frag_slots + m.reservation_waste_slots);
      ASSERT_LE(m.largest_free_run, m.free_blocks);
    }
  }
  EXPECT_GT(appended, ops / 4);
  EXPECT_GT(refused, 0) << "the pool should run full at times";
}

TEST(CacheManagerFuzz, PagedHalfMillionOps) {
  fuzz(AllocatorKind::kPaged, 500000, 1);
}
TEST(CacheManagerFuzz, ContiguousHalfMillionOps) {
  fuzz(AllocatorKind::kContiguous, 500000, 2);
}

}  // namespace
}  // namespace kvscope

// TokenEvictor on hand-built caches: which tokens stay, blocks going back to the pool, compaction
// moving K/V bytes with their tokens, position shifts re-rotating keys, and bad configurations.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/common/error.h"
#include "engine/evict/attention_stats.h"
#include "engine/evict/token_evictor.h"
#include "engine/quant/kv_codec.h"

namespace kvscope {
namespace {

constexpr int kLayers = 2, kHeads = 1, kHeadDim = 4, kBlock = 4;

KvLayout small_layout(int num_blocks, KvFormat f = {}) {
  return KvLayout{kLayers, kHeads, kHeadDim, kBlock, num_blocks, f, f};
}

EvictorOptions options(EvictionKind kind, int budget,
                       CompactionPolicy c = CompactionPolicy::kNever) {
  EvictorOptions o;
  o.policy.kind = kind;
  o.policy.budget = budget;
  o.compaction = c;
  return o;
}

// Key row of token t in `layer` (distinct per token and layer, exactly representable in int8).
std::vector<float> key_of(int t, int layer) {
  return {static_cast<float>(t), 1.0f + layer, -0.5f * t, 2.0f};
}

// The backend that applies the position shift's key re-rotations (on the host tiles).
Backend& cpu_backend() {
  static const std::unique_ptr<Backend> backend = make_cpu_backend(1);
  return *backend;
}

// A sequence whose K and V rows identify their token: append, write, let the evictor act.
struct Seq {
  KvCacheManager cache;
  TokenEvictor evictor;
  explicit Seq(const EvictorOptions& o, int num_blocks = 16, KvFormat f = {})
      : cache(make(num_blocks, f)), evictor(cache, SeqId(0), o, 10000.0f, cpu_backend()) {}
  static KvCacheManager make(int num_blocks, KvFormat f) {
    KvCacheManager c(small_layout(num_blocks, f), AllocatorKind::kPaged, 1 << 20, true);
    c.require_add_sequence(SeqId(0));
    return c;
  }
  void append(int tokens, const AttentionRecorder* rec = nullptr) {
    for (int i = 0; i < tokens; ++i) {
      ASSERT_TRUE(cache.append_slots(SeqId(0), 1));
      const int t = evictor.next_token();
      const KvSeqView v = evictor.view();
      for (int l = 0; l < kLayers; ++l) {
        const auto k = key_of(t, l);
        quant::write_token(v, l, KvKind::kKey, k.data());
        quant::write_token(v, l, KvKind::kValue, k.data());
      }
      evictor.after_token(rec);
      cache.check_invariants();
    }
  }
  std::vector<int> live_tokens() const {
    std::vector<int> out;
    for (std::size_t s = 0; s < evictor.slot_live().size(); ++s) {
      if (evictor.slot_live()[s]) out.push_back(evictor.slot_tokens()[s]);
    }
    return out;
  }
  // Key of `slot` in `layer` as stored (decoded).
  std::vector<float> stored_key(int slot, int layer) {
    KvSeqView v = cache.view(SeqId(0));
    quant::TileReader r(v, layer, KvKind::kKey);
    float tmp[kHeadDim];
    const float* h = r.head(slot, 0, tmp);
    return {h, h + kHeadDim};
  }
};

std::vector<int> range(int lo, int hi) {
  std::vector<int> v;
  for (int i = lo; i < hi; ++i) v.push_back(i);
  return v;
}

TEST(TokenEvictor, WindowFreesWholeBlocksWithoutMoving) {
  Seq s(options(EvictionKind::kWindow, 6));
  s.append(22);
  // Each query saw at most 6 tokens (itself included): after the last one, the 5 newest remain.
  EXPECT_EQ(s.live_tokens(), range(17, 22));
  // Blocks [16..19] and [20..21]: every fully evicted block went back to the pool.
  EXPECT_EQ(s.cache.table(SeqId(0)).blocks.size(), 2u);
  EXPECT_EQ(s.cache.pool().num_used(), 2);
  EXPECT_EQ(s.evictor.counters().slots_moved, 0);
  EXPECT_EQ(s.evictor.counters().blocks_freed, 4);
  EXPECT_EQ(s.evictor.counters().tokens_evicted, 17);
  // Keys stayed with their tokens and kept their original positions.
  for (std::size_t slot = 0; slot < s.evictor.slot_tokens().size(); ++slot) {
    const int t = s.evictor.slot_tokens()[slot];
    EXPECT_EQ(s.evictor.slot_positions()[slot], t);
    if (s.evictor.slot_live()[slot]) {
      EXPECT_EQ(s.stored_key(static_cast<int>(slot), 1), key_of(t, 1));
    }
  }
}

TEST(TokenEvictor, SinksWithoutCompactionKeepTheSinkBlock) {
  auto o = options(EvictionKind::kSinksWindow, 8);
  o.policy.sinks = 2;
  Seq s(o);
  s.append(20);
  EXPECT_EQ(s.live_tokens(), (std::vector<int>{0, 1, 15, 16, 17, 18, 19}));
  // Block 0 (tokens 0..3) is half dead but never compacted; the middle blocks are gone.
  EXPECT_EQ(s.cache.table(SeqId(0)).blocks.size(), 3u);
  EXPECT_EQ(s.evictor.slot_tokens()[0], 0);
  EXPECT_EQ(s.evictor.slot_live()[2], 0);
}

TEST(TokenEvictor, CompactionMovesBytesWithTheirTokens) {
  for (auto policy : {CompactionPolicy::kAlways, CompactionPolicy::kHalfEmpty}) {
    for (KvFormat f :
         {KvFormat{}, parse_kv_format("int8", "test"), parse_kv_format("int4-g4", "test")}) {
      auto o = options(EvictionKind::kSinksWindow, 8, policy);
      o.policy.sinks = 2;
      Seq s(o, 16, f);
      s.append(20);
      EXPECT_EQ(s.live_tokens(), (std::vector<int>{0, 1, 15, 16, 17, 18, 19}));
      // Always: 7 live slots packed into 2 blocks. Half: a block 3/4 live is left alone, so one
      // hole may remain, still 2 blocks. Either way each live slot holds its own token's bytes.
      const int slots = s.cache.table(SeqId(0)).num_tokens;
      EXPECT_TRUE(policy != CompactionPolicy::kAlways || slots == 7) << slots;
      EXPECT_LE(slots, 8);
      EXPECT_EQ(s.cache.pool().num_used(), 2);
      EXPECT_GT(s.evictor.counters().slots_moved, 0);
      Seq ref(options(EvictionKind::kNone, 0), 16, f);  // the same tokens never evicted
      ref.append(20);
      for (int slot = 0; slot < slots; ++slot) {
        if (!s.evictor.slot_live()[static_cast<std::size_t>(slot)]) continue;
        const int t = s.evictor.slot_tokens()[static_cast<std::size_t>(slot)];
        for (int l = 0; l < kLayers; ++l)
          EXPECT_EQ(s.stored_key(slot, l), ref.stored_key(t, l)) << f.name();
      }
    }
  }
}

TEST(TokenEvictor, HalfEmptyWaitsForAHalfEmptyBlock) {
  // Random eviction with budget 15 out of 16 slots: one hole at a time, blocks stay > half live.
  auto o = options(EvictionKind::kRandom, 15, CompactionPolicy::kHalfEmpty);
  Seq s(o);
  s.append(16);
  EXPECT_EQ(s.evictor.counters().tokens_evicted, 2);
  EXPECT_EQ(s.evictor.counters().slots_moved, 0);
  EXPECT_EQ(s.cache.table(SeqId(0)).num_tokens, 16);
}

TEST(TokenEvictor, ShiftPositionsReRotatesKeysToContiguousPositions) {
  for (KvFormat f : {KvFormat{}, parse_kv_format("fp16", "test")}) {
    auto o = options(EvictionKind::kSinksWindow, 6);
    o.policy.sinks = 1;
    o.positions = PositionMode::kShift;
    Seq s(o, 16, f);
    // Keys as the forward pass would store them: rotated at the position the evictor hands out.
    for (int i = 0; i < 14; ++i) {
      ASSERT_TRUE(s.cache.append_slots(SeqId(0), 1));
      const int t = s.evictor.next_token(), pos = s.evictor.next_position();
      const KvSeqView v = s.evictor.view();
      for (int l = 0; l < kLayers; ++l) {
        auto k = key_of(t, l), q = k;
        cpu::rope(q.data(), k.data(), pos, kHeadDim, kHeadDim, kHeadDim, 10000.0f);
        quant::write_token(v, l, KvKind::kKey, k.data());
        quant::write_token(v, l, KvKind::kValue, k.data());
      }
      s.evictor.after_token(nullptr);
    }
    EXPECT_EQ(s.live_tokens(), (std::vector<int>{0, 10, 11, 12, 13}));
    EXPECT_EQ(s.evictor.next_position(), 5);
    int expect_pos = 0;
    for (std::size_t slot = 0; slot < s.evictor.slot_live().size(); ++slot) {
      if (!s.evictor.slot_live()[slot]) continue;
      EXPECT_EQ(s.evictor.slot_positions()[slot], expect_pos);
      for (int l = 0; l < kLayers; ++l) {
        auto k = key_of(s.evictor.slot_tokens()[slot], l), q = k;
        cpu::rope(q.data(), k.data(), expect_pos, kHeadDim, kHeadDim, kHeadDim, 10000.0f);
        const auto got = s.stored_key(static_cast<int>(slot), l);
        const float tol = f.dtype == KvDtype::kF32 ? 1e-4f : 0.05f;
        for (int i = 0; i < kHeadDim; ++i)
          EXPECT_NEAR(got[static_cast<std::size_t>(i)], k[static_cast<std::size_t>(i)], tol)
              << f.name();
      }
      ++expect_pos;
    }
    EXPECT_GT(s.evictor.counters().keys_rotated, 0);
  }
}

TEST(TokenEvictor, AttentionPoliciesFollowTheRecorder) {
  // One layer/head recorder fed a hand-built pattern: every query puts its mass on token 3 and
  // token 9, and the rest evenly on itself.
  auto run = [](EvictionKind kind) -> std::vector<int> {
    auto o = options(kind, 6);
    o.policy.recent = 2;
    o.policy.observation_window = 2;
    o.policy.pool_kernel = 1;
    Seq s(o);
    AttentionRecorder rec({1, 1, 64}, 0, 2);
    for (int i = 0; i < 14; ++i) {
      EXPECT_TRUE(s.cache.append_slots(SeqId(0), 1));
      const int t = s.evictor.next_token();
      const KvSeqView v = s.evictor.view();
      std::vector<float> w(static_cast<std::size_t>(v.num_slots), 0.0f);
      float rest = 1.0f;
      for (int slot = 0; slot < v.num_slots; ++slot) {
        const int tok = s.evictor.slot_tokens()[static_cast<std::size_t>(slot)];
        if (!v.slot_live[slot]) continue;
        if (tok == 3 || tok == 9) w[static_cast<std::size_t>(slot)] = 0.4f, rest -= 0.4f;
      }
      w[static_cast<std::size_t>(v.num_slots - 1)] += rest;
      rec.set_slot_positions(s.evictor.slot_tokens());
      rec.on_attention(0, 0, t, w);
      s.evictor.after_token(&rec);
    }
    return s.live_tokens();
  };
  // H2O: token 2's one query of self-attention (1.0) outweighs 10 and 11 (0.2 each): the heavy
  // hitter set keeps a stale early token, as the method does (worked through step by step).
  EXPECT_EQ(run(EvictionKind::kH2O), (std::vector<int>{2, 3, 9, 12, 13}));
  // TOVA and SnapKV (window of 2 queries, no pooling) keep what the latest queries look at.
  EXPECT_EQ(run(EvictionKind::kTova), (std::vector<int>{3, 9, 11, 12, 13}));
  EXPECT_EQ(run(EvictionKind::kSnapKV), (std::vector<int>{3, 9, 11, 12, 13}));
}

TEST(TokenEvictor, BadConfigurationsAreOneLineErrors) {
  auto expect_error = [](auto&& f, const std::string& needle) {
    try {
      f();
      FAIL() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error([] { Seq s(options(EvictionKind::kWindow, 1)); },
               "eviction budget: expected an integer >= 2, got 1");
  expect_error(
      [] {
        auto o = options(EvictionKind::kSinksWindow, 4);
        o.policy.sinks = 3;
        Seq s(o);
      },
      "sink tokens: expected an integer in [0, budget - 1)");
  expect_error([] { Seq s(options(EvictionKind::kWindow, 4), 16, parse_kv_format("kivi2", "t")); },
               "KIVI");
  expect_error(
      [] {
        KvCacheManager c(small_layout(8), AllocatorKind::kContiguous, 16, true);
        c.require_add_sequence(SeqId(0));
        TokenEvictor e(c, SeqId(0), options(EvictionKind::kWindow, 4), 10000.0f, cpu_backend());
      },
      "needs the paged allocator");
  expect_error(
      [] {
        Seq s(options(EvictionKind::kH2O, 4));
        s.append(6, nullptr);
      },
      "h2o needs attention statistics");
  expect_error([] { (void)parse_compaction_policy("sometimes", "--compact"); },
               "--compact: expected a compaction policy (never, half, always), got 'sometimes'");
}

}  // namespace
}  // namespace kvscope

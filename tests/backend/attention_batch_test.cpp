// The CPU backend's attention_batch: a prefill chunk's causal queries over a quantized pool share
// one dequantization of the keys and values, read once per tile of eight queries (the tiles' KV
// heads split over the threads), and over an fp32 pool go in tiles of eight that read each block
// once. Each query's output and weights must be exactly what paged_attention gives it
// alone, for every per-token format and block size tried here (GQA: 3 query heads per KV head);
// KIVI pools (whose open group the view's length decides) and evicting views keep the per-query
// path. The scores' dot products (attention_dot.h) against their order written out by hand. A
// sequence's own float copy (DecodedKvCache), kept up to date as it grows, gives the same bits as
// reading the pool, token by token (KIVI's groups closing along the way) and chunk by chunk.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/attention_dot.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/common/bit_cast.h"
#include "engine/common/error.h"
#include "engine/kv/decoded_kv.h"
#include "engine/sparse/key_selector.h"
#include "tests/quant/kv_test_support.h"

namespace kvscope {
namespace {

constexpr int kHeads = 6, kKvHeads = 2, kHeadDim = 16, kTokens = 37;

// Every head's weights of every query, in the order they were reported.
class Rows final : public AttentionObserver {
 public:
  void on_attention(int, int head, int pos, std::span<const float> w) override {
    calls.push_back(std::to_string(pos) + "/" + std::to_string(head));
    for (float x : w) weights.push_back(kvscope::bit_cast<std::uint32_t>(x));
  }
  std::vector<std::string> calls;
  std::vector<std::uint32_t> weights;
};

std::vector<std::uint32_t> bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> out;
  for (float x : v) out.push_back(kvscope::bit_cast<std::uint32_t>(x));
  return out;
}

// Runs queries 0..tokens-1 (query t sees slots 0..t, as in a causal chunk) through `run`.
template <class Run>
std::vector<float> causal_queries(test::QuantCache& cache, const std::vector<float>& q, Rows& rows,
                                  const Run& run, int tokens = kTokens, int head_dim = kHeadDim,
                                  KeySelector* selector = nullptr) {
  const std::size_t per_query = static_cast<std::size_t>(kHeads) * head_dim;
  std::vector<float> out(static_cast<std::size_t>(tokens) * per_query, 0.0f);
  std::vector<AttentionQuery> queries;
  const KvSeqView all = cache.view();
  for (int t = 0; t < tokens; ++t) {
    AttentionQuery a;
    a.view = all;
    a.view.num_slots = t + 1;
    a.view.selector = selector;
    a.q = q.data() + static_cast<std::size_t>(t) * per_query;
    a.out = out.data() + static_cast<std::size_t>(t) * per_query;
    a.query_pos = t;
    a.observer = &rows;
    queries.push_back(a);
  }
  run(queries);
  return out;
}

// A sparse selection with no state (it may be called for many queries at once): every slot
// whose index plus the head's is a multiple of 3 is skipped, but the query's own.
class EveryThirdSkipped final : public KeySelector {
 public:
  void select(const SelectionQuery& query, std::span<float> scores) override {
    for (std::size_t t = 0; t + 1 < scores.size(); ++t) {
      if ((t + static_cast<std::size_t>(query.head)) % 3 == 0) scores[t] = -INFINITY;
    }
  }
};

// Causal queries over a (K, V) cache of `tokens` random tokens: attention_batch (on one thread
// and on two) gives each its own paged_attention result and weights, bit for bit. Returns
// whether the batch took the shared decoded path.
bool batch_matches_each_query(const std::string& kf, const std::string& vf, int block_size,
                              int head_dim, int tokens, KeySelector* selector) {
  static const auto backend = make_cpu_backend(1);
  static const auto two_threads = make_cpu_backend(2);
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 1.5f);
  std::vector<float> k, v, q;
  for (int i = 0; i < tokens * kKvHeads * head_dim; ++i) k.push_back(d(rng));
  for (int i = 0; i < tokens * kKvHeads * head_dim; ++i) v.push_back(d(rng));
  for (int i = 0; i < tokens * kHeads * head_dim; ++i) q.push_back(d(rng));
  const AttentionShape shape{kHeads, kKvHeads, head_dim};
  const KvFormat K = parse_kv_format(kf, "test"), V = parse_kv_format(vf, "test");
  test::QuantCache cache(K, V, block_size, tokens, kKvHeads, head_dim);
  for (int t = 0; t < tokens; ++t) {
    cache.append(&k[static_cast<std::size_t>(t) * kKvHeads * head_dim],
                 &v[static_cast<std::size_t>(t) * kKvHeads * head_dim]);
  }
  std::string what = kf;
  what.append("/").append(vf).append(" block ").append(std::to_string(block_size));
  what.append(" head ").append(std::to_string(head_dim)).append(", ");
  what.append(std::to_string(tokens)).append(selector ? " queries, selecting" : " queries");
  Rows one_rows, batch_rows, threaded_rows;
  std::vector<float> scratch;
  const std::vector<float> one = causal_queries(
      cache, q, one_rows,
      [&](const std::vector<AttentionQuery>& qs) {
        for (const AttentionQuery& a : qs)
          cpu::paged_attention(a.view, 0, shape, a.q, a.out, a.query_pos, a.observer, scratch);
      },
      tokens, head_dim, selector);
  const std::vector<float> batch = causal_queries(
      cache, q, batch_rows,
      [&](const std::vector<AttentionQuery>& qs) { backend->attention_batch(0, shape, qs); },
      tokens, head_dim, selector);
  const std::vector<float> threaded = causal_queries(
      cache, q, threaded_rows,
      [&](const std::vector<AttentionQuery>& qs) { two_threads->attention_batch(0, shape, qs); },
      tokens, head_dim, selector);
  EXPECT_EQ(bits(one), bits(batch)) << what;
  EXPECT_EQ(one_rows.calls, batch_rows.calls) << what;
  EXPECT_EQ(one_rows.weights, batch_rows.weights) << what;
  EXPECT_EQ(bits(one), bits(threaded)) << what << ", 2 threads";
  EXPECT_EQ(one_rows.calls, threaded_rows.calls) << what << ", 2 threads";
  EXPECT_EQ(one_rows.weights, threaded_rows.weights) << what << ", 2 threads";
  return cpu::shares_decoded_kv(cache.view());
}

TEST(AttentionBatch, SharedDequantizationGivesEachQueryItsOwnResultBitForBit) {
  int shared = 0;
  // (K, V) formats: each per-token format beside an int4 and an fp32 V.
  std::vector<std::pair<std::string, std::string>> formats;
  for (const char* kf : {"fp16", "int8", "int4", "int2-g8", "fp8-e4m3", "fp32"})
    for (const char* vf : {"int4", "fp32"}) formats.emplace_back(kf, vf);
  // Head sizes: the tests' 16, SmolLM2's 64 (value sums in registers), and 12 (neither the
  // written-out dot nor a fixed size: the plain loops).
  for (const int head_dim : {kHeadDim, 64, 12}) {
    for (const auto& [kf, vf] : formats) {
      for (int block_size : {1, 4, 16}) {
        const bool took = batch_matches_each_query(kf, vf, block_size, head_dim, kTokens, nullptr);
        if (took && head_dim == kHeadDim) ++shared;
      }
    }
  }
  // 150 queries: value sums carried across 64-slot blocks, a second batch of 64 queries, work
  // enough for two threads at every head size; and a key selector called for many queries at
  // once.
  EveryThirdSkipped skip;
  for (const int head_dim : {64, 12}) {
    for (KeySelector* selector :
         {static_cast<KeySelector*>(nullptr), static_cast<KeySelector*>(&skip)}) {
      EXPECT_TRUE(batch_matches_each_query("fp16", "int4", 16, head_dim, 150, selector));
      EXPECT_TRUE(batch_matches_each_query("int8", "fp32", 4, head_dim, 150, selector));
    }
  }
  // The shared path ran for the 11 pairs with a per-token format (3 block sizes each), not for
  // fp32/fp32 (read in place, in tiles).
  EXPECT_EQ(shared, 11 * 3);
  const KvFormat f32 = parse_kv_format("fp32", "test");
  test::QuantCache f32_cache(f32, f32, 4, kTokens, kKvHeads, kHeadDim);
  EXPECT_TRUE(cpu::tiles_fp32_attention(f32_cache.view()));
  EXPECT_FALSE(cpu::tiles_fp32_attention(
      test::QuantCache(f32, parse_kv_format("int4", "test"), 4, kTokens, kKvHeads, kHeadDim)
          .view()));
  // Nor for KIVI, whose open group is read from staging by the view's length, nor for a view
  // with evicted slots.
  const KvFormat kivi = parse_kv_format("kivi4", "test"), int4 = parse_kv_format("int4", "test");
  test::QuantCache kivi_cache(kivi, kivi, 4, kTokens, kKvHeads, kHeadDim);
  EXPECT_FALSE(cpu::shares_decoded_kv(kivi_cache.view()));
  test::QuantCache int4_cache(int4, int4, 4, kTokens, kKvHeads, kHeadDim);
  KvSeqView evicting = int4_cache.view();
  const std::vector<std::uint8_t> live(kTokens, 1);
  evicting.slot_live = live.data();
  EXPECT_TRUE(cpu::shares_decoded_kv(int4_cache.view()));
  EXPECT_FALSE(cpu::shares_decoded_kv(evicting));
}

// The fp32 tiles at SmolLM2's head size (64) and at one the written-out dot does not take (12,
// the plain loop): each query's output and weights are its own, bit for bit.
TEST(AttentionBatch, Fp32TilesGiveEachQueryItsOwnResultBitForBit) {
  for (const int head_dim : {64, 12}) {
    std::mt19937 rng(11);
    std::normal_distribution<float> d(0.0f, 1.0f);
    const int tokens = 29;
    std::vector<float> k, v, q;
    for (int i = 0; i < tokens * kKvHeads * head_dim; ++i) k.push_back(d(rng));
    for (int i = 0; i < tokens * kKvHeads * head_dim; ++i) v.push_back(d(rng));
    for (int i = 0; i < tokens * kHeads * head_dim; ++i) q.push_back(d(rng));
    const AttentionShape shape{kHeads, kKvHeads, head_dim};
    const KvFormat f32 = parse_kv_format("fp32", "test");
    test::QuantCache cache(f32, f32, 16, tokens, kKvHeads, head_dim);
    for (int t = 0; t < tokens; ++t) {
      cache.append(&k[static_cast<std::size_t>(t) * kKvHeads * head_dim],
                   &v[static_cast<std::size_t>(t) * kKvHeads * head_dim]);
    }
    auto run = [&](bool tiled, Rows& rows) {
      std::vector<float> scratch;
      return causal_queries(
          cache, q, rows,
          [&](const std::vector<AttentionQuery>& queries) {
            if (tiled) {
              cpu::paged_attention_fp32_queries(0, shape, queries, scratch);
              return;
            }
            for (const AttentionQuery& a : queries)
              cpu::paged_attention(a.view, 0, shape, a.q, a.out, a.query_pos, a.observer, scratch);
          },
          tokens, head_dim);
    };
    Rows one_rows, tile_rows;
    const std::vector<float> one = run(false, one_rows);
    const std::vector<float> tiles = run(true, tile_rows);
    EXPECT_EQ(bits(one), bits(tiles)) << "head_dim " << head_dim;
    EXPECT_EQ(one_rows.calls, tile_rows.calls) << "head_dim " << head_dim;
    EXPECT_EQ(one_rows.weights, tile_rows.weights) << "head_dim " << head_dim;
  }
}

// attention_dot: eight lanes of fused multiply-adds in element order, then (s0 + s2) + (s1 + s3)
// with s_i = lane_i + lane_{i+4}; attention_dot4 and attention_dot8 give each of their keys the
// same bits.
TEST(AttentionDot, TheOrderWrittenOutAndFourKeysAtOnce) {
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 3.0f);
  for (const int n : {8, 16, 64, 128}) {
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<float> q(static_cast<std::size_t>(n)), k(static_cast<std::size_t>(n) * 4 + 5);
      for (float& x : q) x = d(rng);
      for (float& x : k) x = d(rng);
      const std::size_t stride = static_cast<std::size_t>(n) + 1;
      float lane[8] = {};
      for (int j = 0; j < n; ++j) lane[j % 8] = std::fma(q[j], k[j], lane[j % 8]);
      const float s0 = lane[0] + lane[4], s1 = lane[1] + lane[5], s2 = lane[2] + lane[6],
                  s3 = lane[3] + lane[7];
      const float want = (s0 + s2) + (s1 + s3);
      ASSERT_EQ(kvscope::bit_cast<std::uint32_t>(cpu::attention_dot(q.data(), k.data(), n)),
                kvscope::bit_cast<std::uint32_t>(want))
          << "n " << n;
      float four[4];
      cpu::attention_dot4(q.data(), k.data(), stride, n, four);
      for (int i = 0; i < 4; ++i) {
        const float one = cpu::attention_dot(q.data(), k.data() + i * stride, n);
        ASSERT_EQ(kvscope::bit_cast<std::uint32_t>(four[i]), kvscope::bit_cast<std::uint32_t>(one))
            << "n " << n << ", key " << i;
      }
    }
  }
  // Eight keys at once, reduced together: each the bits of its own attention_dot.
  for (const int n : {8, 16, 64, 128}) {
    for (int trial = 0; trial < 50; ++trial) {
      const std::size_t stride = static_cast<std::size_t>(n) + 3;
      std::vector<float> q(static_cast<std::size_t>(n)), k(stride * 8);
      for (float& x : q) x = d(rng);
      for (float& x : k) x = d(rng);
      float eight[8];
      cpu::attention_dot8(q.data(), k.data(), stride, n, eight);
      for (int i = 0; i < 8; ++i) {
        const float one = cpu::attention_dot(q.data(), k.data() + i * stride, n);
        ASSERT_EQ(kvscope::bit_cast<std::uint32_t>(eight[i]), kvscope::bit_cast<std::uint32_t>(one))
            << "n " << n << ", key " << i;
      }
    }
  }
  // Any number of keys in one call (eight, four, then one at a time).
  for (const int n : {8, 64}) {
    const std::size_t stride = static_cast<std::size_t>(n) + 1;
    std::vector<float> q(static_cast<std::size_t>(n)), k(stride * 30);
    for (float& x : q) x = d(rng);
    for (float& x : k) x = d(rng);
    for (int count = 0; count <= 30; ++count) {
      std::vector<float> got(static_cast<std::size_t>(count) + 1, -1.0f);
      cpu::attention_dots(q.data(), k.data(), stride, n, count, got.data());
      for (int i = 0; i < count; ++i) {
        ASSERT_EQ(kvscope::bit_cast<std::uint32_t>(got[static_cast<std::size_t>(i)]),
                  kvscope::bit_cast<std::uint32_t>(
                      cpu::attention_dot(q.data(), k.data() + i * stride, n)))
            << "n " << n << ", " << count << " keys, key " << i;
      }
      EXPECT_EQ(got[static_cast<std::size_t>(count)], -1.0f) << "wrote past " << count;
    }
  }
  // A GQA group's query heads against one key: 1 to 9 heads, each its own attention_dot.
  for (const int n : {8, 64}) {
    std::vector<float> q(static_cast<std::size_t>(n) * 9), k(static_cast<std::size_t>(n));
    for (float& x : q) x = d(rng);
    for (float& x : k) x = d(rng);
    for (int count = 1; count <= 9; ++count) {
      float got[9];
      cpu::attention_dots_one_key(q.data(), static_cast<std::size_t>(n), count, k.data(), n, got);
      for (int j = 0; j < count; ++j) {
        ASSERT_EQ(kvscope::bit_cast<std::uint32_t>(got[j]),
                  kvscope::bit_cast<std::uint32_t>(
                      cpu::attention_dot(q.data() + static_cast<std::size_t>(j) * n, k.data(), n)))
            << "n " << n << ", " << count << " heads, head " << j;
      }
    }
  }
  EXPECT_TRUE(cpu::attention_dot_fits(64));
  EXPECT_FALSE(cpu::attention_dot_fits(12));
  EXPECT_FALSE(cpu::attention_dot_fits(0));
}

// Random K, V and query rows for `tokens` tokens.
struct Rows3 {
  std::vector<float> k, v, q;
  Rows3(int tokens, int head_dim, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.5f);
    for (int i = 0; i < tokens * kKvHeads * head_dim; ++i) k.push_back(d(rng));
    for (int i = 0; i < tokens * kKvHeads * head_dim; ++i) v.push_back(d(rng));
    for (int i = 0; i < tokens * kHeads * head_dim; ++i) q.push_back(d(rng));
  }
  const float* k_of(int t, int hd) const { return &k[static_cast<std::size_t>(t) * kKvHeads * hd]; }
  const float* v_of(int t, int hd) const { return &v[static_cast<std::size_t>(t) * kKvHeads * hd]; }
  const float* q_of(int t, int hd) const { return &q[static_cast<std::size_t>(t) * kHeads * hd]; }
};

// Token by token, as a KIVI sequence runs: after each token is written, its query through the
// sequence's float copy gives paged_attention's output and weights on the pool, bit for bit. The
// copy holds each slot once its bytes are final; KIVI's open group is read again each time, and
// re-read from the tiles when the group closes (groups of 32 and of 64 tokens, over blocks of 4
// and 16: groups spanning blocks and blocks holding groups).
TEST(DecodedKvCache, TokenByTokenEachQueryGetsThePoolsResultBitForBit) {
  const std::pair<const char*, const char*> formats[] = {
      {"kivi2", "kivi2"}, {"kivi4", "kivi4"}, {"kivi2-r64", "kivi2-r64"}, {"kivi2", "fp32"},
      {"fp32", "kivi4"},  {"int4", "int4"},   {"fp16", "int8"},           {"fp8-e4m3", "int2-g8"}};
  const int tokens = 100;
  for (const int head_dim : {kHeadDim, 64}) {
    const Rows3 r(tokens, head_dim, 7);
    const AttentionShape shape{kHeads, kKvHeads, head_dim};
    for (const auto& [kf, vf] : formats) {
      for (const int block_size : {4, 16}) {
        test::QuantCache cache(parse_kv_format(kf, "test"), parse_kv_format(vf, "test"), block_size,
                               tokens, kKvHeads, head_dim);
        DecodedKvCache decoded(cache.storage(), tokens);
        std::vector<float> scratch;
        const std::size_t per_query = static_cast<std::size_t>(kHeads) * head_dim;
        for (int t = 0; t < tokens; ++t) {
          cache.append(r.k_of(t, head_dim), r.v_of(t, head_dim), &decoded);
          std::vector<float> want(per_query, 0.0f), got(per_query, 0.0f);
          Rows want_rows, got_rows;
          KvSeqView view = cache.view();
          cpu::paged_attention(view, 0, shape, r.q_of(t, head_dim), want.data(), t, &want_rows,
                               scratch);
          view.decoded = &decoded;
          cpu::paged_attention(view, 0, shape, r.q_of(t, head_dim), got.data(), t, &got_rows,
                               scratch);
          ASSERT_EQ(bits(want), bits(got)) << kf << "/" << vf << " block " << block_size << " head "
                                           << head_dim << " token " << t;
          ASSERT_EQ(want_rows.weights, got_rows.weights) << kf << "/" << vf << " token " << t;
        }
        // Slots of closed KIVI groups (and every slot of a per-token format) are held as final.
        const KvFormat K = parse_kv_format(kf, "test");
        const int want_final = K.is_kivi() ? tokens - tokens % K.residual : tokens;
        EXPECT_EQ(decoded.final_keys(0), want_final) << kf << "/" << vf;
      }
    }
  }
}

// Chunk by chunk, as a prefill runs: every token of a chunk is written, then attention_batch runs
// the chunk's causal queries through the copy (which decodes only the slots that became final).
// Each query gets what paged_attention on the pool gave it right after its own token was written,
// bit for bit, on one thread and on two: for KIVI, the rows of its own open group as written and
// the groups closed before it quantized, even where its group closed later in the chunk.
TEST(DecodedKvCache, ChunkByChunkEachQueryGetsItsOwnMomentsResultBitForBit) {
  const int tokens = 90, chunk = 13, head_dim = 64;
  const Rows3 r(tokens, head_dim, 9);
  const AttentionShape shape{kHeads, kKvHeads, head_dim};
  const std::size_t per_query = static_cast<std::size_t>(kHeads) * head_dim;
  const std::pair<const char*, const char*> formats[] = {{"int4", "int4"},
                                                         {"fp8-e5m2", "int2-g8"},
                                                         {"kivi2", "kivi2"},
                                                         {"kivi4-r8", "fp16"},
                                                         {"fp32", "kivi2-r64"}};
  for (const int threads : {1, 2}) {
    const auto backend = make_cpu_backend(threads);
    for (const auto& [kf, vf] : formats) {
      const KvFormat K = parse_kv_format(kf, "test"), V = parse_kv_format(vf, "test");
      // The reference: each query right after its token is written, on a pool of its own.
      test::QuantCache one_by_one(K, V, 16, tokens, kKvHeads, head_dim);
      std::vector<float> want(per_query * tokens, 0.0f), scratch;
      Rows want_rows;
      for (int t = 0; t < tokens; ++t) {
        one_by_one.append(r.k_of(t, head_dim), r.v_of(t, head_dim));
        cpu::paged_attention(one_by_one.view(), 0, shape, r.q_of(t, head_dim),
                             want.data() + static_cast<std::size_t>(t) * per_query, t, &want_rows,
                             scratch);
      }
      test::QuantCache cache(K, V, 16, tokens, kKvHeads, head_dim);
      DecodedKvCache decoded(cache.storage(), tokens);
      std::vector<float> got(want.size(), 0.0f);
      Rows got_rows;
      for (int t0 = 0; t0 < tokens; t0 += chunk) {
        const int t1 = std::min(tokens, t0 + chunk);
        for (int t = t0; t < t1; ++t)
          cache.append(r.k_of(t, head_dim), r.v_of(t, head_dim), &decoded);
        std::vector<AttentionQuery> queries;
        for (int t = t0; t < t1; ++t) {
          AttentionQuery a;
          a.view = cache.view();
          a.view.num_slots = t + 1;
          a.view.decoded = &decoded;
          a.q = r.q_of(t, head_dim);
          a.out = got.data() + static_cast<std::size_t>(t) * per_query;
          a.query_pos = t;
          a.observer = &got_rows;
          queries.push_back(a);
        }
        backend->attention_batch(0, shape, queries);
        const int closed = K.is_kivi() ? t1 - t1 % K.residual : t1;
        EXPECT_EQ(decoded.final_keys(0), closed) << kf << "/" << vf << ", chunk at " << t0;
      }
      const std::string what = std::string(kf) + "/" + vf + ", " + std::to_string(threads);
      ASSERT_EQ(bits(want), bits(got)) << what;
      ASSERT_EQ(want_rows.calls, got_rows.calls) << what;
      ASSERT_EQ(want_rows.weights, got_rows.weights) << what;
    }
  }
}

// A view the copy cannot mirror is a caller's bug, said as such: another pool's copy, more slots
// than its room, fewer slots than it already holds as final, evicted slots.
TEST(DecodedKvCache, AViewItCannotMirrorIsAnInternalError) {
  const KvFormat int4 = parse_kv_format("int4", "test");
  const Rows3 r(20, kHeadDim, 1);
  const AttentionShape shape{kHeads, kKvHeads, kHeadDim};
  test::QuantCache cache(int4, int4, 4, 20, kKvHeads, kHeadDim);
  test::QuantCache other(int4, int4, 4, 20, kKvHeads, kHeadDim);
  for (int t = 0; t < 12; ++t) cache.append(r.k_of(t, kHeadDim), r.v_of(t, kHeadDim));
  std::vector<float> out(static_cast<std::size_t>(kHeads) * kHeadDim), scratch;
  const auto attend = [&](const KvSeqView& view) {
    cpu::paged_attention(view, 0, shape, r.q_of(0, kHeadDim), out.data(), view.num_slots - 1,
                         nullptr, scratch);
  };
  DecodedKvCache others(other.storage(), 20);
  KvSeqView view = cache.view();
  view.decoded = &others;
  EXPECT_THROW(attend(view), InternalError);
  DecodedKvCache small(cache.storage(), 8);
  view.decoded = &small;
  EXPECT_THROW(attend(view), InternalError);
  DecodedKvCache fits(cache.storage(), 20);
  view.decoded = &fits;
  EXPECT_NO_THROW(attend(view));
  EXPECT_EQ(fits.final_keys(0), 12);
  KvSeqView shorter = view;
  shorter.num_slots = 10;
  EXPECT_THROW(attend(shorter), InternalError);
  const std::vector<std::uint8_t> live(12, 1);
  KvSeqView evicting = view;
  evicting.slot_live = live.data();
  EXPECT_THROW(attend(evicting), InternalError);
  fits.clear();
  EXPECT_EQ(fits.final_keys(0), 0);
  EXPECT_NO_THROW(attend(shorter));
  // A KIVI pool whose writes went by the copy: its open group's rows were never kept.
  const KvFormat kivi = parse_kv_format("kivi2-r8", "test");
  test::QuantCache staged(kivi, kivi, 4, 20, kKvHeads, kHeadDim);
  DecodedKvCache missed(staged.storage(), 20);
  for (int t = 0; t < 5; ++t) staged.append(r.k_of(t, kHeadDim), r.v_of(t, kHeadDim));
  KvSeqView unkept = staged.view();
  unkept.decoded = &missed;
  EXPECT_THROW(attend(unkept), InternalError);
  // Nor may a layer's rows skip a slot.
  test::QuantCache gap(kivi, kivi, 4, 20, kKvHeads, kHeadDim);
  DecodedKvCache kept(gap.storage(), 20);
  gap.append(r.k_of(0, kHeadDim), r.v_of(0, kHeadDim));
  EXPECT_THROW(gap.append(r.k_of(1, kHeadDim), r.v_of(1, kHeadDim), &kept), InternalError);
}

}  // namespace
}  // namespace kvscope

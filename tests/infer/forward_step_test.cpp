// One engine step as one forward: Backend::matmul_batch gives every element bit for bit what
// matmul gives for that row, and Transformer::forward_step over a mixed step (a prefill chunk of
// one sequence, decode tokens of others) gives exactly the logits of running its tokens one by
// one, on the real model and on a GQA synthetic shape.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "engine/infer/transformer.h"
#include "engine/kv/cache_manager.h"
#include "engine/kv/kv_format.h"
#include "engine/model/synthetic.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

std::vector<float> random_floats(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

bool bitwise_equal(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(MatmulBatch, EveryElementIsWhatMatmulGivesForItsRow) {
  for (int threads : {1, 2}) {
    auto backend = make_cpu_backend(threads);
    // Widths that are and are not multiples of the vector width, with inputs grouped by 8 (up
    // to 768 floats) and by 4 (wider); input counts that leave groups of 4 and single rows; row
    // counts big enough to split over threads and into several row blocks.
    for (int n : {7, 64, 288, 577, 1000}) {
      for (int m : {1, 2, 3, 13, 16}) {
        const int d1 = 300, d2 = 41;
        const auto w1 = random_floats(static_cast<std::size_t>(d1) * n, 1);
        const auto w2 = random_floats(static_cast<std::size_t>(d2) * n, 2);
        const auto x = random_floats(static_cast<std::size_t>(m) * n, 3);
        std::vector<float> o1(static_cast<std::size_t>(m) * d1),
            o2(static_cast<std::size_t>(m) * d2);
        const MatmulOut outs[] = {{o1.data(), w1.data(), d1}, {o2.data(), w2.data(), d2}};
        backend->matmul_batch(x.data(), m, n, outs);
        for (int t = 0; t < m; ++t) {
          std::vector<float> r1(static_cast<std::size_t>(d1)), r2(static_cast<std::size_t>(d2));
          backend->matmul(r1.data(), x.data() + static_cast<std::size_t>(t) * n, w1.data(), n, d1);
          backend->matmul(r2.data(), x.data() + static_cast<std::size_t>(t) * n, w2.data(), n, d2);
          EXPECT_TRUE(
              bitwise_equal(std::span(o1).subspan(static_cast<std::size_t>(t) * d1, d1), r1))
              << "threads " << threads << " n " << n << " m " << m << " row " << t;
          EXPECT_TRUE(
              bitwise_equal(std::span(o2).subspan(static_cast<std::size_t>(t) * d2, d2), r2))
              << "threads " << threads << " n " << n << " m " << m << " row " << t;
        }
      }
    }
  }
}

// Runs sequence A's prompt chunk [0, chunk) and one decode token of B and C (whose earlier tokens
// were run one by one) as one step, and the same tokens one by one in a second cache; the logits
// of every token that wants them must match bit for bit, and so must every K/V byte.
void expect_step_equals_solo(std::shared_ptr<const Model> model, int threads,
                             const std::string& format = "fp32") {
  const ModelConfig& c = model->config();
  auto backend = make_cpu_backend(threads);
  Transformer batched(model, *backend), solo(model, *backend);
  const int block_size = format == "fp32" ? 4 : 8, blocks = 64;
  const KvFormat f = parse_kv_format(format, "test");
  KvLayout layout{c.n_layers, c.n_kv_heads, c.head_dim(), block_size, blocks, f, f};
  KvCacheManager cache_b(layout, AllocatorKind::kPaged, c.seq_len, true);
  KvCacheManager cache_s(layout, AllocatorKind::kPaged, c.seq_len, true);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> tok(1, c.vocab_size - 1);
  const int chunk = format == "fp32" ? 6 : 13;  // 13: crosses a KIVI group of 8 mid-chunk
  std::vector<std::vector<int>> seqs = {{}, {}, {}};
  for (int s = 0; s < 3; ++s) {
    for (int i = 0; i < (s == 0 ? chunk : 5 + s); ++i) seqs[s].push_back(tok(rng));
    cache_b.require_add_sequence(SeqId(s));
    cache_s.require_add_sequence(SeqId(s));
  }
  // History of B and C, run one by one into both caches.
  for (int s = 1; s < 3; ++s) {
    for (int pos = 0; pos + 1 < static_cast<int>(seqs[s].size()); ++pos) {
      for (auto* pair : {&cache_b, &cache_s}) {
        pair->require_append_slots(SeqId(s), 1);
        KvSeqView v = pair->view(SeqId(s));
        (pair == &cache_b ? batched : solo).forward(seqs[s][pos], pos, v);
      }
    }
  }
  // The step: A's chunk, then B's and C's newest token.
  std::vector<StepToken> step;
  cache_b.require_append_slots(SeqId(0), chunk);
  for (int pos = 0; pos < chunk; ++pos) {
    KvSeqView v = cache_b.view(SeqId(0));
    v.num_slots = pos + 1;
    step.push_back({seqs[0][pos], pos, v, true, nullptr});  // every chunk token: logits too
  }
  for (int s = 1; s < 3; ++s) {
    cache_b.require_append_slots(SeqId(s), 1);
    const int pos = static_cast<int>(seqs[s].size()) - 1;
    step.push_back({seqs[s][pos], pos, cache_b.view(SeqId(s)), true, nullptr});
  }
  const std::vector<float> got = [&] {
    const std::span<float> l = batched.forward_step(step);
    return std::vector<float>(l.begin(), l.end());
  }();
  const auto vocab = static_cast<std::size_t>(c.vocab_size);
  ASSERT_EQ(got.size(), step.size() * vocab);
  std::size_t row = 0;
  for (int s = 0; s < 3; ++s) {
    const int from = s == 0 ? 0 : static_cast<int>(seqs[s].size()) - 1;
    for (int pos = from; pos < static_cast<int>(seqs[s].size()); ++pos, ++row) {
      cache_s.require_append_slots(SeqId(s), 1);
      const std::span<float> want = solo.forward(seqs[s][pos], pos, cache_s.view(SeqId(s)));
      EXPECT_TRUE(bitwise_equal(std::span<const float>(got).subspan(row * vocab, vocab), want))
          << "sequence " << s << " position " << pos;
    }
  }
  // Same tables in both caches (same allocation order), so the pools must match byte for byte.
  const KvStorage& a = *cache_b.storage();
  const KvStorage& b = *cache_s.storage();
  for (int l = 0; l < c.n_layers; ++l) {
    for (KvKind kind : {KvKind::kKey, KvKind::kValue}) {
      for (int blk = 0; blk < blocks; ++blk) {
        EXPECT_EQ(std::memcmp(a.tile(l, kind, BlockId(blk)), b.tile(l, kind, BlockId(blk)),
                              a.layout().tile_bytes(kind)),
                  0)
            << "layer " << l << " block " << blk;
      }
    }
  }
}

TEST(ForwardStep, MixedStepEqualsTokensOneByOneOnTheRealModel) {
  expect_step_equals_solo(test::real_model().model, 1);
  expect_step_equals_solo(test::real_model().model, 2);
}

TEST(ForwardStep, MixedStepEqualsTokensOneByOneWithGqa) {
  // SmolLM2's head layout (9 query heads over 3 KV heads) at a small width; random weights.
  const auto model = make_synthetic_model(
      parse_synthetic_spec("dim=72,hidden=192,layers=2,heads=9,kv_heads=3,vocab=300,seq_len=64"));
  expect_step_equals_solo(model, 2);
}

// SmolLM2 with its matmuls on the file's Q4_1/Q8_0 blocks (--weight-format native): a token's
// 8-bit activations and integer dot products do not depend on the step it shares, at one thread
// and at two (rows split between threads).
TEST(ForwardStep, MixedStepEqualsTokensOneByOneOnNativeQuantizedWeights) {
  ASSERT_NE(test::smollm2_native().model->native(), nullptr);
  expect_step_equals_solo(test::smollm2_native().model, 1);
  expect_step_equals_solo(test::smollm2_native().model, 2);
}

// Quantized pools: per-token formats, and KIVI, whose key groups are quantized when a group of
// tokens completes (a later token of the chunk must not change what an earlier one saw).
TEST(ForwardStep, MixedStepEqualsTokensOneByOneInQuantizedPools) {
  for (const char* f : {"fp16", "int8", "int4-g8", "kivi2-r8", "kivi4-r8"}) {
    SCOPED_TRACE(f);
    expect_step_equals_solo(test::real_model().model, 1, f);
  }
}

TEST(ForwardStep, OnlyTokensThatWantLogitsGetThem) {
  const auto& m = test::real_model();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  const ModelConfig& c = m.model->config();
  KvLayout layout{c.n_layers, c.n_kv_heads, c.head_dim(), 16, 8, {}, {}};
  KvCacheManager cache(layout, AllocatorKind::kPaged, c.seq_len, true);
  cache.require_add_sequence(SeqId(0));
  cache.require_append_slots(SeqId(0), 3);
  std::vector<StepToken> step;
  for (int pos = 0; pos < 3; ++pos) {
    KvSeqView v = cache.view(SeqId(0));
    v.num_slots = pos + 1;
    step.push_back({1 + pos, pos, v, pos == 2, nullptr});
  }
  EXPECT_EQ(t.forward_step(step).size(), static_cast<std::size_t>(c.vocab_size));
  for (StepToken& s : step) s.want_logits = false;
  EXPECT_TRUE(t.forward_step(step).empty());
}

}  // namespace
}  // namespace kvscope

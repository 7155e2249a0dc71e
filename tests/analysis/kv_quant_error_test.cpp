// Per-position KV quantization error on the real model: int8 small but nonzero, int4 worse, fp32
// none, KIVI's open group exact, layer 0 of the quantized run identical to the round trip.
#include "engine/analysis/kv_quant_error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "engine/common/error.h"
#include "engine/infer/step_runner.h"
#include "engine/kv/cache_manager.h"
#include "engine/kv/kv_storage.h"
#include "engine/quant/kv_codec.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

std::vector<int> story_tokens() {
  const auto& m = test::real_model();
  return m.tokenizer->encode(
      "Once upon a time, there was a little dog named Spot. Spot liked to run in the garden and "
      "play with his red ball.",
      /*bos=*/true, /*eos=*/false);
}

KvErrorProfile measure(const std::vector<int>& tokens, const std::string& format,
                       int block_size = 16) {
  const auto& m = test::real_model();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  const KvFormat f = parse_kv_format(format, "test");
  std::optional<KvErrorProfile> p = measure_kv_error(t, tokens, f, f, block_size);
  EXPECT_TRUE(p.has_value());
  return p.value_or(KvErrorProfile{});
}

double mean(const std::vector<float>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// One line of measured figures (quoted in docs/ui/attention.md): K and V relative error over every
// layer, KV head and position (mean, max, position 0's mean) and the attention-row TV mean.
void print_summary(const char* name, const KvErrorProfile& p) {
  double k0 = 0.0;
  for (int l = 0; l < p.n_layers; ++l)
    for (int h = 0; h < p.kv_heads; ++h) k0 += p.k(l, h, 0) / (p.n_layers * p.kv_heads);
  std::printf(
      "[ figures  ] %s, %d tokens: K mean %.4f max %.4f (position 0: %.4f), V mean %.4f max "
      "%.4f, attention TV mean %.4f\n",
      name, p.positions, mean(p.k_error), *std::max_element(p.k_error.begin(), p.k_error.end()), k0,
      mean(p.v_error), *std::max_element(p.v_error.begin(), p.v_error.end()), mean(p.attention_tv));
}

TEST(KvQuantErrorMath, TotalVariationOfHandMadeRows) {
  const std::vector<float> p = {0.5f, 0.5f, 0.0f}, q = {0.25f, 0.25f, 0.5f};
  EXPECT_NEAR(total_variation(p, q), 0.5, 1e-7);
  EXPECT_EQ(total_variation(p, p), 0.0);
  const std::vector<float> a = {1.0f, 0.0f}, b = {0.0f, 1.0f};
  EXPECT_NEAR(total_variation(a, b), 1.0, 1e-7);
  EXPECT_THROW(total_variation(p, a), Error);
}

TEST(KvQuantError, Int8KeysAndValuesRoundTripWithSmallNonzeroError) {
  const std::vector<int> tokens = story_tokens();
  ASSERT_GT(tokens.size(), 20u);
  const KvErrorProfile p = measure(tokens, "int8");
  ASSERT_EQ(p.positions, static_cast<int>(tokens.size()));
  ASSERT_EQ(p.k_error.size(), static_cast<std::size_t>(p.n_layers * p.kv_heads * p.positions));
  const float k_max = *std::max_element(p.k_error.begin(), p.k_error.end());
  const float v_max = *std::max_element(p.v_error.begin(), p.v_error.end());
  // Symmetric int8 per head: error about 1/(2*127) of the head's largest value.
  EXPECT_GT(mean(p.k_error), 1e-3);
  EXPECT_LT(k_max, 0.05f);
  EXPECT_GT(mean(p.v_error), 1e-3);
  EXPECT_LT(v_max, 0.05f);
  for (float e : p.k_error) EXPECT_GT(e, 0.0f);
  // The attention rows of the int8 run differ a little from the fp32 run's.
  EXPECT_GT(mean(p.attention_tv), 0.0);
  EXPECT_LT(mean(p.attention_tv), 0.05);
  for (int l = 0; l < p.n_layers; ++l)
    for (int h = 0; h < p.n_heads; ++h) EXPECT_EQ(p.tv(l, h, 0), 0.0f) << "one key: row is [1]";
}

TEST(KvQuantError, Int4IsWorseThanInt8AtTheSamePositions) {
  const std::vector<int> tokens = story_tokens();
  const KvErrorProfile p8 = measure(tokens, "int8");
  const KvErrorProfile p4 = measure(tokens, "int4");
  print_summary("int8", p8);
  print_summary("int4", p4);
  ASSERT_EQ(p8.k_error.size(), p4.k_error.size());
  for (int l = 0; l < p8.n_layers; ++l) {
    for (int pos = 0; pos < p8.positions; ++pos) {
      double k8 = 0, k4 = 0, v8 = 0, v4 = 0;
      for (int h = 0; h < p8.kv_heads; ++h) {
        k8 += p8.k(l, h, pos);
        k4 += p4.k(l, h, pos);
        v8 += p8.v(l, h, pos);
        v4 += p4.v(l, h, pos);
      }
      EXPECT_GT(k4, k8) << "layer " << l << " position " << pos;
      EXPECT_GT(v4, v8) << "layer " << l << " position " << pos;
    }
  }
  EXPECT_GT(mean(p4.attention_tv), mean(p8.attention_tv));
}

TEST(KvQuantError, Fp32HasNoErrorAnywhere) {
  const KvErrorProfile p = measure(story_tokens(), "fp32");
  for (float e : p.k_error) ASSERT_EQ(e, 0.0f);
  for (float e : p.v_error) ASSERT_EQ(e, 0.0f);
  for (float e : p.attention_tv) ASSERT_EQ(e, 0.0f);
}

TEST(KvQuantError, KiviKeepsItsOpenGroupExact) {
  const std::vector<int> tokens = story_tokens();  // 20..32 tokens: residual 8 -> groups of 8
  const int n = static_cast<int>(tokens.size());
  const KvErrorProfile p = measure(tokens, "kivi2-r8-g8", 8);
  const int open_from = n / 8 * 8;
  for (int l = 0; l < p.n_layers; ++l) {
    for (int h = 0; h < p.kv_heads; ++h) {
      for (int pos = 0; pos < n; ++pos) {
        if (pos >= open_from) {
          EXPECT_EQ(p.k(l, h, pos), 0.0f) << "open group, position " << pos;
          EXPECT_EQ(p.v(l, h, pos), 0.0f) << "open group, position " << pos;
        } else {
          EXPECT_GT(p.k(l, h, pos), 0.0f) << "quantized group, position " << pos;
        }
      }
    }
  }
}

// The runs go 8 positions per engine step; each attention-row TV is the one two token-by-token
// runs give (their rows taken query by query with SoloSequence::step), bit for bit, for a
// per-token format and for KIVI (whose steps run in waves), and the observers see every row.
TEST(KvQuantError, ChunkedRunsGiveTheTokenByTokenRowDistances) {
  struct Rows : AttentionObserver {
    std::vector<std::vector<float>> rows;  // in call order
    void on_attention(int, int, int, std::span<const float> w) override {
      rows.emplace_back(w.begin(), w.end());
    }
  };
  const auto& m = test::real_model();
  const ModelConfig& c = m.model->config();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  const std::vector<int> tokens = story_tokens();
  const int n = static_cast<int>(tokens.size());
  ASSERT_GT(n, 16);
  for (const char* format : {"int4", "kivi2-r16"}) {
    const KvFormat f = parse_kv_format(format, "test");
    Rows seen_exact, seen_quantized;
    KvErrorHooks hooks;
    hooks.exact_observer = &seen_exact;
    hooks.quantized_observer = &seen_quantized;
    const std::optional<KvErrorProfile> p = measure_kv_error(t, tokens, f, f, 16, hooks);
    ASSERT_TRUE(p.has_value());
    Rows exact, quantized;
    SoloSequence a(kv_layout_for(c, 16, 1, KvFormat{}, KvFormat{}), n);
    SoloSequence b(kv_layout_for(c, 16, 1, f, f), n);
    for (int token : tokens) {
      a.step(t, token, &exact);
      b.step(t, token, &quantized);
    }
    EXPECT_EQ(seen_exact.rows, exact.rows) << format;
    EXPECT_EQ(seen_quantized.rows, quantized.rows) << format;
    ASSERT_EQ(exact.rows.size(), static_cast<std::size_t>(c.n_layers) * c.n_heads * n);
    std::size_t i = 0;
    for (int pos = 0; pos < n; ++pos) {
      for (int layer = 0; layer < c.n_layers; ++layer) {
        for (int head = 0; head < c.n_heads; ++head, ++i) {
          ASSERT_EQ(p->attention_tv[p->tv_index(layer, head, pos)],
                    static_cast<float>(total_variation(exact.rows[i], quantized.rows[i])))
              << format << " layer " << layer << " head " << head << " position " << pos;
        }
      }
    }
  }
}

TEST(KvQuantError, OneTokenAndCancellation) {
  const std::vector<int> one = {kTokenBos};
  const KvErrorProfile p = measure(one, "int4");
  EXPECT_EQ(p.positions, 1);
  EXPECT_GT(p.k(0, 0, 0), 0.0f);
  const auto& m = test::real_model();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  const KvFormat f = parse_kv_format("int8", "test");
  KvErrorHooks hooks;
  hooks.cancelled = [] { return true; };
  EXPECT_FALSE(measure_kv_error(t, story_tokens(), f, f, 16, hooks).has_value());
}

TEST(KvQuantError, FormatThatCannotStoreTheShapeIsAnError) {
  const auto& m = test::real_model();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  const KvFormat kivi = parse_kv_format("kivi2", "test");  // residual 32 vs block size 12
  EXPECT_THROW(measure_kv_error(t, story_tokens(), kivi, kivi, 12), Error);
}

// The round trip at layer 0 stores exactly what the quantized run stores: both runs feed the same
// fp32 K/V to the cache there (deeper layers of the quantized run carry propagated error).
TEST(KvQuantError, RoundTripMatchesTheQuantizedRunAtLayerZero) {
  const auto& m = test::real_model();
  const ModelConfig& c = m.model->config();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  const std::vector<int> tokens = story_tokens();
  const int n = static_cast<int>(tokens.size());
  const KvFormat fp32, int4 = parse_kv_format("int4", "test");
  const int blocks = (n + 15) / 16;
  KvCacheManager exact(kv_layout_for(c, 16, blocks, fp32, fp32), AllocatorKind::kPaged, n, true);
  KvCacheManager quant(kv_layout_for(c, 16, blocks, int4, int4), AllocatorKind::kPaged, n, true);
  KvCacheManager round(kv_layout_for(c, 16, blocks, int4, int4), AllocatorKind::kPaged, n, true);
  const SeqId seq(0);
  exact.require_add_sequence(seq);
  quant.require_add_sequence(seq);
  round.require_add_sequence(seq);
  for (int pos = 0; pos < n; ++pos) {
    exact.require_append_slots(seq, 1);
    t.forward(tokens[static_cast<std::size_t>(pos)], pos, exact.view(seq));
    quant.require_append_slots(seq, 1);
    t.forward(tokens[static_cast<std::size_t>(pos)], pos, quant.view(seq));
    round.require_append_slots(seq, 1);
    copy_token_kv(exact.view(seq), pos, round.view(seq));
  }
  const auto hd = static_cast<std::size_t>(c.head_dim());
  std::vector<float> ta(hd), tb(hd);
  int deeper_differs = 0;
  for (int layer = 0; layer < c.n_layers; ++layer) {
    for (const KvKind kind : {KvKind::kKey, KvKind::kValue}) {
      const quant::TileReader a(quant.view(seq), layer, kind), b(round.view(seq), layer, kind);
      for (int s = 0; s < n; ++s) {
        for (int h = 0; h < c.n_kv_heads; ++h) {
          const float* x = a.head(s, h, ta.data());
          const float* y = b.head(s, h, tb.data());
          const bool same = std::equal(x, x + hd, y);
          if (layer == 0)
            ASSERT_TRUE(same) << "layer 0 slot " << s << " head " << h;
          else if (!same)
            ++deeper_differs;
        }
      }
    }
  }
  EXPECT_GT(deeper_differs, 0) << "deeper layers of the int4 run see propagated error";
}

}  // namespace
}  // namespace kvscope

// CacheBlend on the real model (stories260K): chunks prefilled alone and re-rotated into place,
// the selective recompute's two ends (nothing past the check layer leaves the reused cache there;
// every token is the full prefill, bit for bit), which tokens it picks, and the evaluation's rows.
#include "engine/analysis/cache_blend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/backend/backend.h"
#include "engine/common/error.h"
#include "engine/quant/kv_codec.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

const char* kText =
    "Once upon a time, there was a little dog named Spot. Spot liked to run in the garden and "
    "play with his red ball. One day, the ball rolled under a big bush. Spot barked and barked, "
    "but the ball did not come out. His friend the cat came to help, and together they pushed the "
    "bush until the ball rolled back into the sun. Spot was so happy that he ran around the tree "
    "three times. Then the cat and the dog sat down and ate a big red apple together.";

std::vector<int> tokens_of(const LoadedModel& m) {
  return text_windows(*m.tokenizer, kText, 512, "t").front();
}

KvLayout fp32_layout(const ModelConfig& c) {
  return kv_layout_for(c, 16, 1, KvFormat{}, KvFormat{});
}

// K then V of `layer` for slots [0, n), as floats.
std::vector<float> layer_kv(SoloSequence& seq, int layer, int n, const ModelConfig& c) {
  std::vector<float> out;
  std::vector<float> tmp(static_cast<std::size_t>(c.head_dim()));
  const KvSeqView view = seq.view();
  for (const KvKind kind : {KvKind::kKey, KvKind::kValue}) {
    const quant::TileReader reader(view, layer, kind);
    for (int s = 0; s < n; ++s) {
      for (int h = 0; h < c.n_kv_heads; ++h) {
        const float* head = reader.head(s, h, tmp.data());
        out.insert(out.end(), head, head + c.head_dim());
      }
    }
  }
  return out;
}

// Slot s's K (kind 0) or V (kind 1) row of layer_kv's output.
std::span<const float> slot_row(const std::vector<float>& kv, int kind, int s, int n,
                                const ModelConfig& c) {
  const auto row = static_cast<std::size_t>(c.kv_dim());
  return std::span<const float>(kv).subspan((static_cast<std::size_t>(kind * n + s)) * row, row);
}

struct Fixture {
  Fixture() : backend(make_cpu_backend(1)), t(test::real_model().model, *backend) {}
  std::unique_ptr<Backend> backend;
  Transformer t;
  HostStep step;
  const ModelConfig& c() const { return t.config(); }
};

TEST(CacheBlend, ChunksCountsAndPicks) {
  EXPECT_EQ(chunk_starts(10, 3), (std::vector<int>{0, 4, 7}));
  EXPECT_EQ(chunk_starts(8, 1), (std::vector<int>{0}));
  EXPECT_EQ(chunk_starts(4, 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(recompute_count(200, 15), 30);
  EXPECT_EQ(recompute_count(7, 50), 4);  // 3.5 rounds up
  EXPECT_EQ(recompute_count(7, 0), 0);
  EXPECT_EQ(recompute_count(7, 100), 7);
  const std::vector<double> dev = {0.5, 3.0, 0.0, 3.0, 1.0};
  EXPECT_EQ(pick_largest(dev, 2), (std::vector<int>{1, 3}));
  EXPECT_EQ(pick_largest(dev, 3), (std::vector<int>{1, 3, 4}));
  EXPECT_EQ(pick_largest(dev, 0), (std::vector<int>{}));
  EXPECT_EQ(pick_largest(std::vector<double>{1.0, 1.0, 1.0}, 2), (std::vector<int>{0, 1}))
      << "among equals, the earlier";
}

TEST(CacheBlend, BadOptionsNameTheSetting) {
  ModelConfig c;
  c.n_layers = 5;
  BlendOptions o;
  o.chunks = 9;
  try {
    validate(o, c, 8);
    ADD_FAILURE() << "nine chunks of eight tokens";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "blend chunks: expected 1 to the context's 8 tokens (each chunk holds at least one), "
              "got 9");
  }
  o.chunks = 2;
  o.check_layer = 4;
  try {
    validate(o, c, 8);
    ADD_FAILURE() << "no layer after the check";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "blend check layer: expected a layer from 0 to 3 (the model has 5 layers; some must "
              "run after the check), got 4");
  }
  o.check_layer = 3;
  EXPECT_NO_THROW(validate(o, c, 8));
}

// One chunk is the whole context prefilled alone: the full prefill, whichever way it is run.
TEST(CacheBlend, OneChunkReusedIsTheFullPrefill) {
  Fixture f;
  const std::vector<int> context = tokens_of(test::real_model());
  const int n = static_cast<int>(context.size());
  SoloSequence full(fp32_layout(f.c()), n), reused(fp32_layout(f.c()), n);
  prefill_full(f.t, full, context);
  prefill_chunks_alone(f.t, reused, context, chunk_starts(n, 1));
  for (int l = 0; l < f.c().n_layers; ++l)
    EXPECT_EQ(layer_kv(full, l, n, f.c()), layer_kv(reused, l, n, f.c())) << "layer " << l;
}

// Chunks prefilled alone: the first is the full prefill's; a later chunk's layer-0 K/V depend on
// nothing but its tokens and their positions, so once its keys are re-rotated they match the
// full prefill's to rounding (V exactly); from layer 1 on they differ: the later chunks never saw
// the earlier ones.
TEST(CacheBlend, ReusedChunksAreRotatedIntoPlaceButMissTheirContext) {
  Fixture f;
  const ModelConfig& c = f.c();
  const std::vector<int> context = tokens_of(test::real_model());
  const int n = static_cast<int>(context.size());
  const std::vector<int> starts = chunk_starts(n, 3);
  SoloSequence full(fp32_layout(c), n), reused(fp32_layout(c), n);
  prefill_full(f.t, full, context);
  prefill_chunks_alone(f.t, reused, context, starts);
  const std::vector<float> full0 = layer_kv(full, 0, n, c), reused0 = layer_kv(reused, 0, n, c);
  const std::vector<float> full1 = layer_kv(full, 1, n, c), reused1 = layer_kv(reused, 1, n, c);
  double worst_key = 0.0;
  for (int s = 0; s < n; ++s) {
    const auto fk = slot_row(full0, 0, s, n, c), rk = slot_row(reused0, 0, s, n, c);
    for (std::size_t i = 0; i < fk.size(); ++i)
      worst_key = std::max(worst_key, std::abs(static_cast<double>(fk[i]) - rk[i]));
    const auto fv = slot_row(full0, 1, s, n, c), rv = slot_row(reused0, 1, s, n, c);
    EXPECT_TRUE(std::equal(fv.begin(), fv.end(), rv.begin())) << "layer-0 V of slot " << s;
    const bool same1 =
        std::equal(slot_row(full1, 0, s, n, c).begin(), slot_row(full1, 0, s, n, c).end(),
                   slot_row(reused1, 0, s, n, c).begin());
    if (s < starts[1]) {
      EXPECT_TRUE(same1) << "the first chunk is the full prefill's: slot " << s;
    } else if (s == starts[1] || s == starts[2]) {
      EXPECT_FALSE(same1) << "a later chunk's first token attended to itself alone: slot " << s;
    }
  }
  EXPECT_GT(worst_key, 0.0) << "a key rotated in two steps rounds differently";
  EXPECT_LT(worst_key, 1e-4) << "but it is the same rotation";
}

// Recomputing every token runs every layer over every token: the full prefill, bit for bit. With
// none recomputed the pass still ran the check layer for all: layers up to it are the full
// prefill's, the later ones the reused cache's.
TEST(CacheBlend, TheRecomputesTwoEnds) {
  Fixture f;
  const ModelConfig& c = f.c();
  const std::vector<int> context = tokens_of(test::real_model());
  const int n = static_cast<int>(context.size());
  const std::vector<int> starts = chunk_starts(n, 4);
  SoloSequence full(fp32_layout(c), n), reused(fp32_layout(c), n);
  prefill_full(f.t, full, context);
  prefill_chunks_alone(f.t, reused, context, starts);

  SoloSequence all(fp32_layout(c), n);
  prefill_chunks_alone(f.t, all, context, starts);
  const BlendPass every = blend_recompute(f.t, f.step, all, context, 1, n);
  EXPECT_EQ(every.recomputed.size(), static_cast<std::size_t>(n));
  for (int l = 0; l < c.n_layers; ++l)
    EXPECT_EQ(layer_kv(all, l, n, c), layer_kv(full, l, n, c)) << "layer " << l;

  SoloSequence none(fp32_layout(c), n);
  prefill_chunks_alone(f.t, none, context, starts);
  const BlendPass nothing = blend_recompute(f.t, f.step, none, context, 1, 0);
  EXPECT_TRUE(nothing.recomputed.empty());
  for (int l = 0; l < c.n_layers; ++l) {
    SoloSequence& expected = l <= 1 ? full : reused;
    EXPECT_EQ(layer_kv(none, l, n, c), layer_kv(expected, l, n, c)) << "layer " << l;
  }
}

// The pass picks the tokens whose check-layer K/V deviate most; the first chunk, which is the
// full prefill's already, deviates by exactly nothing and is never picked while later chunks'
// tokens remain; what it picked runs the later layers and the rest keeps the reused K/V.
TEST(CacheBlend, PicksTheMostDeviatedTokens) {
  Fixture f;
  const ModelConfig& c = f.c();
  const std::vector<int> context = tokens_of(test::real_model());
  const int n = static_cast<int>(context.size());
  const std::vector<int> starts = chunk_starts(n, 4);
  SoloSequence reused(fp32_layout(c), n), seq(fp32_layout(c), n), full(fp32_layout(c), n);
  prefill_chunks_alone(f.t, reused, context, starts);
  prefill_chunks_alone(f.t, seq, context, starts);
  prefill_full(f.t, full, context);
  const int count = recompute_count(n, 20);
  const BlendPass pass = blend_recompute(f.t, f.step, seq, context, 1, count);
  ASSERT_EQ(pass.deviation.size(), static_cast<std::size_t>(n));
  ASSERT_EQ(pass.recomputed.size(), static_cast<std::size_t>(count));
  // Each deviation, computed here: the squared distance of the full prefill's layer-1 K and V
  // (what the pass recomputes there) from the reused cache's.
  const std::vector<float> full1 = layer_kv(full, 1, n, c), reused1 = layer_kv(reused, 1, n, c);
  for (int s = 0; s < n; ++s) {
    double d = 0.0;
    for (int kind = 0; kind < 2; ++kind) {
      const auto a = slot_row(full1, kind, s, n, c), b = slot_row(reused1, kind, s, n, c);
      for (std::size_t i = 0; i < a.size(); ++i) {
        const double e = static_cast<double>(a[i]) - b[i];
        d += e * e;
      }
    }
    EXPECT_NEAR(pass.deviation[static_cast<std::size_t>(s)], d, 1e-12 * (1.0 + d)) << "slot " << s;
  }
  for (int s = 0; s < starts[1]; ++s) EXPECT_EQ(pass.deviation[static_cast<std::size_t>(s)], 0.0);
  for (int s = starts[1]; s < n; ++s) EXPECT_GT(pass.deviation[static_cast<std::size_t>(s)], 0.0);
  std::vector<bool> picked(static_cast<std::size_t>(n), false);
  for (const int s : pass.recomputed) picked[static_cast<std::size_t>(s)] = true;
  double least_picked = INFINITY, most_left = 0.0;
  for (int s = 0; s < n; ++s) {
    const double d = pass.deviation[static_cast<std::size_t>(s)];
    if (picked[static_cast<std::size_t>(s)]) least_picked = std::min(least_picked, d);
    if (!picked[static_cast<std::size_t>(s)]) most_left = std::max(most_left, d);
  }
  EXPECT_GE(least_picked, most_left);
  EXPECT_TRUE(std::none_of(pass.recomputed.begin(), pass.recomputed.end(),
                           [&](int s) { return s < starts[1]; }));
  // The last layer: the picked tokens' K/V changed, the others' are the reused ones.
  const int last = c.n_layers - 1;
  const std::vector<float> before = layer_kv(reused, last, n, c), after = layer_kv(seq, last, n, c);
  for (int s = 0; s < n; ++s) {
    const auto a = slot_row(before, 1, s, n, c), b = slot_row(after, 1, s, n, c);
    EXPECT_EQ(std::equal(a.begin(), a.end(), b.begin()), !picked[static_cast<std::size_t>(s)])
        << "slot " << s;
  }
}

// The evaluation's rows: 0% is plain reuse (scored against a cache built here the same way), 100%
// and the full prefill match the reference exactly, and recomputing moves the continuation
// towards the full prefill's.
TEST(CacheBlend, EvaluationRowsFromReuseToFullPrefill) {
  Fixture f;
  const ModelConfig& c = f.c();
  const std::vector<int> window = tokens_of(test::real_model());
  BlendSample sample;
  const auto split = window.size() * 3 / 4;
  sample.context.assign(window.begin(), window.begin() + static_cast<long>(split));
  sample.continuation.assign(window.begin() + static_cast<long>(split), window.end());
  const int n = static_cast<int>(sample.context.size());
  BlendOptions o;
  o.chunks = 4;
  const std::vector<int> percents = {0, 30, 100};
  long ticks = 0;
  const BlendReport r = evaluate_blend(f.t, std::span<const BlendSample>(&sample, 1), o, percents,
                                       [&](long done, long total) {
                                         EXPECT_EQ(total, 5);
                                         ticks = done;
                                       });
  EXPECT_EQ(ticks, 5);
  ASSERT_EQ(r.rows.size(), 4u);
  EXPECT_EQ(r.samples, 1);
  EXPECT_EQ(r.full_token_layers, static_cast<long>(n) * c.n_layers);
  const BlendRow &reuse = r.rows[0], &blend = r.rows[1], &all = r.rows[2], &full = r.rows[3];
  EXPECT_EQ(reuse.method, BlendRow::Method::kReuse);
  EXPECT_EQ(reuse.tokens_recomputed, 0);
  EXPECT_EQ(reuse.token_layers, 0);
  EXPECT_EQ(blend.tokens_recomputed, recompute_count(n, 30));
  EXPECT_EQ(blend.token_layers,
            2L * n + static_cast<long>(recompute_count(n, 30)) * (c.n_layers - 2));
  EXPECT_EQ(
      std::accumulate(blend.recomputed_per_chunk.begin(), blend.recomputed_per_chunk.end(), 0L),
      blend.tokens_recomputed);
  EXPECT_EQ(blend.recomputed_per_chunk[0], 0) << "the first chunk needs nothing";
  EXPECT_EQ(full.method, BlendRow::Method::kFull);
  EXPECT_EQ(full.token_layers, r.full_token_layers);
  // 100% ran its own cache (the full prefill's row is the reference itself).
  EXPECT_EQ(all.quality.kl_mean(), 0.0);
  EXPECT_EQ(all.quality.ppl_variant(), all.quality.ppl_reference());
  EXPECT_EQ(all.quality.top1_agreement(), 1.0);
  ASSERT_EQ(r.first_recomputed.size(), 4u);
  EXPECT_EQ(r.first_recomputed[1].size(), static_cast<std::size_t>(blend.tokens_recomputed));

  // Plain reuse, by hand: the chunks alone, re-rotated, then the continuation.
  SoloSequence reference(fp32_layout(c), static_cast<int>(window.size()));
  SoloSequence reused(fp32_layout(c), static_cast<int>(window.size()));
  prefill_full(f.t, reference, sample.context);
  prefill_chunks_alone(f.t, reused, sample.context, chunk_starts(n, 4));
  const auto vocab = static_cast<std::size_t>(c.vocab_size);
  std::vector<std::vector<double>> ref_lp, var_lp;
  const auto collect = [&](std::vector<std::vector<double>>& into) {
    return [&into, vocab](int, std::span<const float> logits) {
      into.emplace_back(vocab);
      log_softmax(logits, std::span<double>(into.back()));
    };
  };
  reference.run(f.t, sample.continuation, collect(ref_lp));
  reused.run(f.t, sample.continuation, collect(var_lp));
  QualityAccumulator by_hand;
  for (std::size_t i = 0; i + 1 < sample.continuation.size(); ++i)
    by_hand.add(ref_lp[i], var_lp[i], sample.continuation[i + 1]);
  EXPECT_EQ(reuse.quality.positions(), by_hand.positions());
  EXPECT_DOUBLE_EQ(reuse.quality.kl_mean(), by_hand.kl_mean());
  EXPECT_DOUBLE_EQ(reuse.quality.ppl_variant(), by_hand.ppl_variant());
  EXPECT_DOUBLE_EQ(reuse.quality.ppl_reference(), by_hand.ppl_reference());

  EXPECT_GT(reuse.quality.kl_mean(), 0.0) << "the chunks never attended to each other";
  EXPECT_LT(blend.quality.kl_mean(), reuse.quality.kl_mean())
      << "recomputing the most deviated 30% moves the continuation towards the full prefill";
}

TEST(CacheBlend, ANarrowingThatIsNotAscendingIsABug) {
  Fixture f;
  const std::vector<int> context = tokens_of(test::real_model());
  const int n = static_cast<int>(context.size());
  SoloSequence seq(fp32_layout(f.c()), n);
  for (int s = 0; s < n; ++s) seq.append();
  const KvSeqView base = seq.view();
  std::vector<StepToken> tokens;
  for (int s = 0; s < n; ++s) {
    KvSeqView v = base;
    v.num_slots = s + 1;
    tokens.push_back({context[static_cast<std::size_t>(s)], s, v, false, nullptr});
  }
  const StepNarrowing backwards = [](int, std::span<const StepToken>) {
    return std::optional<std::vector<int>>(std::vector<int>{3, 1});
  };
  EXPECT_THROW(f.step.run_narrowing(f.t.backend(), f.t.model(), tokens, backwards), InternalError);
}

}  // namespace
}  // namespace kvscope

// The forward pass: golden greedy output on the real model, agreement with a naive reference
// written here from the equations, and paged vs contiguous equality.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/common/log_softmax.h"
#include "engine/infer/generate.h"
#include "engine/model/synthetic.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

std::string run_generate(const std::string& prompt, int steps, AllocatorKind kind, int block_size) {
  const auto& m = test::real_model();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  GenerateOptions o;
  o.prompt = prompt;
  o.steps = steps;
  o.allocator = kind;
  o.block_size = block_size;
  std::string out;
  generate(t, *m.tokenizer, o, [&](const std::string& p) { out += p; });
  return out + "\n";
}

TEST(Forward, GoldenGreedy256FromBos) {
  const std::string golden =
      test::read_text(test::shared_models_dir() + "/golden/stories260K_greedy256.txt");
  ASSERT_FALSE(golden.empty());
  EXPECT_EQ(run_generate("", 256, AllocatorKind::kContiguous, 16), golden);
}

TEST(Forward, GoldenGreedyWithCopiedWeights) {
  const std::string golden =
      test::read_text(test::shared_models_dir() + "/golden/stories260K_greedy256.txt");
  ASSERT_FALSE(golden.empty());
  auto model = Model::load(test::real_model().model->source(), WeightStorage::kCopied);
  auto backend = make_cpu_backend(1);
  Transformer t(model, *backend);
  GenerateOptions o;
  o.steps = 256;
  std::string out;
  generate(t, *test::real_model().tokenizer, o, [&](const std::string& p) { out += p; });
  EXPECT_EQ(out + "\n", golden);
}

TEST(Forward, GoldenGreedyThroughPagedCacheEveryBlockSize) {
  const std::string golden =
      test::read_text(test::shared_models_dir() + "/golden/stories260K_greedy256.txt");
  for (int bs : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
    EXPECT_EQ(run_generate("", 256, AllocatorKind::kPaged, bs), golden) << "block size " << bs;
  }
}

// generate() runs the prompt's positions in chunks of kDefaultStepTokens (one engine step each):
// the text, the tokens and each position's log-probability are those of the token-by-token loop
// (generate_tokens forcing the same prompt), bit for bit, through the contiguous and the paged
// allocator, for a prompt of two chunks and a prompt shorter than one.
TEST(Forward, GenerateRunsThePromptInChunksWithTheTokenByTokenResults) {
  const auto& m = test::real_model();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  for (const char* prompt : {"Once upon a time, there was a little girl named Lily who loved to "
                             "play in the park with her big red ball and her best friend",
                             "The cat"}) {
    for (AllocatorKind kind : {AllocatorKind::kContiguous, AllocatorKind::kPaged}) {
      GenerateOptions o;
      o.prompt = prompt;
      o.steps = 90;
      o.allocator = kind;
      o.score_tokens = true;
      o.stop_at_bos = false;
      const GenerateResult chunked = generate(t, *m.tokenizer, o, [](const std::string&) {});
      const std::vector<int> encoded = m.tokenizer->encode(prompt, true, false);
      ASSERT_EQ(chunked.num_prompt_tokens, static_cast<int>(encoded.size()));
      ASSERT_EQ(chunked.prefill_positions, static_cast<int>(encoded.size()));
      std::vector<std::vector<float>> logits;
      const std::vector<int> one_by_one = generate_tokens(
          t, std::vector<int>(encoded.begin() + 1, encoded.end()), o.steps, o, &logits);
      EXPECT_EQ(chunked.tokens, one_by_one) << prompt;
      ASSERT_EQ(chunked.next_logprob.size(), logits.size());
      std::vector<float> log_p(logits[0].size());
      for (std::size_t pos = 0; pos < logits.size(); ++pos) {
        log_softmax(std::span<const float>(logits[pos]), std::span<float>(log_p));
        ASSERT_EQ(chunked.next_logprob[pos], log_p[static_cast<std::size_t>(one_by_one[pos + 1])])
            << prompt << " position " << pos;
      }
    }
  }
}

// A direct transcription of the Llama equations, with K/V in plain arrays.
std::vector<std::vector<float>> naive_logits(const Model& m, const std::vector<int>& tokens) {
  const ModelConfig& c = m.config();
  const Weights& w = m.weights();
  const int d = c.dim, hd = c.head_dim(), kvd = c.kv_dim(), H = c.hidden_dim;
  std::vector<std::vector<std::vector<float>>> K(c.n_layers), V(c.n_layers);
  auto mat = [](const float* W, const std::vector<float>& x, int rows) {
    std::vector<float> y(rows, 0.0f);
    for (int i = 0; i < rows; ++i) {
      double acc = 0;
      for (std::size_t j = 0; j < x.size(); ++j) acc += double(W[i * x.size() + j]) * x[j];
      y[i] = float(acc);
    }
    return y;
  };
  auto norm = [&](const std::vector<float>& x, const float* g) {
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    float s = float(1.0 / std::sqrt(ss / x.size() + 1e-5));
    std::vector<float> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = g[i] * x[i] * s;
    return y;
  };
  auto rot = [&](std::vector<float>& v, int pos) {
    for (std::size_t i = 0; i < v.size(); i += 2) {
      double f = std::pow(10000.0, -double(i % hd) / hd), a = pos * f;
      float x0 = v[i], x1 = v[i + 1];
      v[i] = float(x0 * std::cos(a) - x1 * std::sin(a));
      v[i + 1] = float(x0 * std::sin(a) + x1 * std::cos(a));
    }
  };
  std::vector<std::vector<float>> all;
  for (std::size_t pos = 0; pos < tokens.size(); ++pos) {
    std::vector<float> x(w.token_embedding + tokens[pos] * d,
                         w.token_embedding + (tokens[pos] + 1) * d);
    for (int l = 0; l < c.n_layers; ++l) {
      auto xn = norm(x, w.rms_att + l * d);
      auto q = mat(w.wq + l * d * d, xn, d);
      auto k = mat(w.wk + l * kvd * d, xn, kvd);
      auto v = mat(w.wv + l * kvd * d, xn, kvd);
      rot(q, int(pos));
      rot(k, int(pos));
      K[l].push_back(k);
      V[l].push_back(v);
      std::vector<float> att(d, 0.0f);
      for (int h = 0; h < c.n_heads; ++h) {
        int g = h / c.gqa_group();
        std::vector<double> s(pos + 1);
        double mx = -1e30;
        for (std::size_t t = 0; t <= pos; ++t) {
          double dot = 0;
          for (int i = 0; i < hd; ++i) dot += double(q[h * hd + i]) * K[l][t][g * hd + i];
          s[t] = dot / std::sqrt(double(hd));
          mx = std::max(mx, s[t]);
        }
        double sum = 0;
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (std::size_t t = 0; t <= pos; ++t)
          for (int i = 0; i < hd; ++i) att[h * hd + i] += float(s[t] / sum * V[l][t][g * hd + i]);
      }
      auto o = mat(w.wo + l * d * d, att, d);
      for (int i = 0; i < d; ++i) x[i] += o[i];
      xn = norm(x, w.rms_ffn + l * d);
      auto a = mat(w.w1 + l * H * d, xn, H);
      auto b = mat(w.w3 + l * H * d, xn, H);
      for (int i = 0; i < H; ++i) a[i] = float(a[i] / (1.0 + std::exp(-double(a[i]))) * b[i]);
      auto f = mat(w.w2 + l * d * H, a, d);
      for (int i = 0; i < d; ++i) x[i] += f[i];
    }
    all.push_back(mat(w.wcls, norm(x, w.rms_final), c.vocab_size));
  }
  return all;
}

TEST(Forward, MatchesNaiveReference) {
  const auto& m = test::real_model();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  std::vector<int> prompt =
      m.tokenizer->encode("Once upon a time, a cat sat on the mat.", true, false);
  prompt.erase(prompt.begin());  // generate_tokens starts from BOS itself
  std::vector<std::vector<float>> logits;
  GenerateOptions o;
  o.allocator = AllocatorKind::kPaged;
  o.block_size = 4;
  auto tokens = generate_tokens(t, prompt, 24, o, &logits);
  auto ref =
      naive_logits(*m.model, std::vector<int>(tokens.begin(), tokens.begin() + logits.size()));
  ASSERT_EQ(ref.size(), logits.size());
  for (std::size_t p = 0; p < ref.size(); ++p) {
    for (std::size_t i = 0; i < ref[p].size(); ++i) {
      ASSERT_NEAR(logits[p][i], ref[p][i], 1e-4 + 1e-4 * std::fabs(ref[p][i]))
          << "pos " << p << " logit " << i;
    }
  }
}

TEST(Forward, PagedLogitsEqualContiguousWithinTolerance) {
  const auto& m = test::real_model();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  GenerateOptions contiguous;
  std::vector<std::vector<float>> ref;
  auto ref_tokens = generate_tokens(t, {}, 200, contiguous, &ref);
  for (int bs : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
    GenerateOptions paged;
    paged.allocator = AllocatorKind::kPaged;
    paged.block_size = bs;
    std::vector<std::vector<float>> got;
    auto tokens = generate_tokens(t, {}, 200, paged, &got);
    EXPECT_EQ(tokens, ref_tokens) << "block size " << bs;
    ASSERT_EQ(got.size(), ref.size());
    for (std::size_t p = 0; p < ref.size(); ++p)
      for (std::size_t i = 0; i < ref[p].size(); ++i) ASSERT_NEAR(got[p][i], ref[p][i], 1e-5);
  }
}

TEST(Forward, SyntheticGqaShapeRuns) {
  auto m = make_synthetic_model(
      parse_synthetic_spec("dim=64,layers=2,heads=8,kv_heads=2,hidden=96,vocab=64,seq_len=32"));
  auto backend = make_cpu_backend(1);
  Transformer t(m, *backend);
  auto tokens = generate_tokens(t, {}, 32, GenerateOptions{}, nullptr);
  EXPECT_GE(tokens.size(), 2u);
  for (int tok : tokens) EXPECT_LT(tok, 64);
}

}  // namespace
}  // namespace kvscope

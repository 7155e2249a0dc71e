// SmolLM2-135M-Instruct (GGUF Q4_1) against llama.cpp, an engine nobody here wrote: logits and
// greedy tokens on the reference's own continuations (tests/data/smollm2_golden.json, written by
// scripts/smollm2_reference.py from llama-cpp-python).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "engine/analysis/quality.h"
#include "engine/infer/generate.h"
#include "engine/infer/transformer.h"
#include "engine/model/chat.h"
#include "engine/model/synthetic.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

// Two references, both llama.cpp:
// - on the F32 copy of the model (every tensor dequantized by the gguf package): both engines
//   multiply fp32 weights by fp32 activations, so logits agree to float rounding in sums of
//   different order (measured: at most 0.026 on logits of about 20; kF32Tolerance) and the
//   argmax is the same except at an exact near-tie (measured: the same at all 320 positions);
// - on the Q4_1 file itself: llama.cpp quantizes each matmul's activations to 8 bits (Q8_1), so
//   its logits differ by rounding noise that grows through 30 layers (kQ4Tolerance; llama.cpp's
//   own F32 and Q4_1 runs differ by as much, measured by scripts/smollm2_reference.py), and its
//   greedy token may differ only where its top-2 gap is below kNearTie.
constexpr double kF32Tolerance = 0.05;
constexpr double kF32NearTie = 0.02;
constexpr double kQ4Tolerance = 1.5;
constexpr double kNearTie = 0.5;

struct TopK {
  std::vector<int> ids;        // [k] best first
  std::vector<double> logits;  // [k]
};

struct Golden {
  std::string prompt;
  std::vector<int> prompt_ids;
  std::vector<int> greedy_ids;
  std::vector<TopK> q4;   // [position] llama.cpp on the Q4_1 file
  std::vector<TopK> f32;  // [position] llama.cpp on the F32 copy, same tokens
};

std::vector<TopK> read_positions(const nlohmann::json& positions) {
  std::vector<TopK> out;
  for (const auto& p : positions) {
    out.push_back(
        {p.at("top_ids").get<std::vector<int>>(), p.at("top_logits").get<std::vector<double>>()});
  }
  return out;
}

// Largest |ours - reference| over the reference's top-k ids.
double max_diff(std::span<const float> logits, const TopK& ref) {
  double worst = 0.0;
  for (std::size_t k = 0; k < ref.ids.size(); ++k) {
    worst =
        std::max(worst, std::fabs(logits[static_cast<std::size_t>(ref.ids[k])] - ref.logits[k]));
  }
  return worst;
}

std::vector<Golden> load_golden() {
  const std::string path = std::string(KVSCOPE_SOURCE_DIR) + "/tests/data/smollm2_golden.json";
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<Golden> out;
  for (const auto& c : j.at("cases")) {
    Golden g;
    g.prompt = c.at("prompt").get<std::string>();
    g.prompt_ids = c.at("prompt_ids").get<std::vector<int>>();
    g.greedy_ids = c.at("greedy_ids").get<std::vector<int>>();
    g.q4 = read_positions(c.at("positions"));
    g.f32 = read_positions(c.at("f32_positions"));
    out.push_back(std::move(g));
  }
  return out;
}

// synthetic:smollm2-135m (random weights, for batch benchmarks at this shape) is the file's shape.
TEST(SmolLM2, SyntheticPresetHasTheFilesShape) {
  const ModelConfig& f = test::smollm2().model->config();
  const ModelConfig p = parse_synthetic_spec("smollm2-135m").config;
  EXPECT_EQ(p.dim, f.dim);
  EXPECT_EQ(p.hidden_dim, f.hidden_dim);
  EXPECT_EQ(p.n_layers, f.n_layers);
  EXPECT_EQ(p.n_heads, f.n_heads);
  EXPECT_EQ(p.n_kv_heads, f.n_kv_heads);
  EXPECT_EQ(p.head_dim(), f.head_dim());
  EXPECT_EQ(p.vocab_size, f.vocab_size);
  EXPECT_EQ(p.seq_len, f.seq_len);
  EXPECT_EQ(p.rope_theta, f.rope_theta);
  EXPECT_EQ(p.rms_eps, f.rms_eps);
  EXPECT_EQ(p.shared_classifier, f.shared_classifier);
}

TEST(SmolLM2, TokenizesTheGoldenPromptsAsLlamaCpp) {
  const Tokenizer& tok = *test::smollm2().tokenizer;
  for (const Golden& g : load_golden()) {
    EXPECT_EQ(tok.encode(g.prompt, /*bos=*/false, /*eos=*/false), g.prompt_ids) << g.prompt;
  }
}

// Teacher-forced on prompt + the reference's greedy tokens: calls check(case, index, position,
// logits) at every position the golden file covers.
void teacher_forced(
    const LoadedModel& m,
    const std::function<void(const Golden&, std::size_t, int, std::span<const float>)>& check) {
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  auto fp32 = parse_kv_format("fp32", "test");
  auto variant = make_kv_format_variant(fp32, fp32, 16);
  for (const Golden& g : load_golden()) {
    std::vector<int> window = g.prompt_ids;
    window.insert(window.end(), g.greedy_ids.begin(), g.greedy_ids.end() - 1);
    const int first = static_cast<int>(g.prompt_ids.size()) - 1;
    variant->run(t, window, [&](int pos, std::span<const float> logits) {
      if (pos >= first) check(g, static_cast<std::size_t>(pos - first), pos, logits);
    });
  }
}

int argmax(std::span<const float> logits) {
  return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

std::string where(const Golden& g, int pos) {
  return g.prompt.substr(0, 30) + "... position " + std::to_string(pos);
}

// The fp32 path (--weight-format f32): every position's top-k logits within tolerance of both
// references, and our argmax the reference's token unless it is a near-tie.
TEST(SmolLM2, LogitsAndGreedyTokensMatchLlamaCpp) {
  double worst_f32 = 0.0, worst_q4 = 0.0;
  int positions = 0, differ_f32 = 0, differ_q4 = 0;
  teacher_forced(test::smollm2(),
                 [&](const Golden& g, std::size_t i, int pos, std::span<const float> logits) {
                   const std::string at = where(g, pos);
                   const TopK& f = g.f32[i];
                   const TopK& q = g.q4[i];
                   const double d_f32 = max_diff(logits, f), d_q4 = max_diff(logits, q);
                   worst_f32 = std::max(worst_f32, d_f32);
                   worst_q4 = std::max(worst_q4, d_q4);
                   EXPECT_LE(d_f32, kF32Tolerance) << at;
                   EXPECT_LE(d_q4, kQ4Tolerance) << at;
                   const int ours = argmax(logits);
                   ++positions;
                   if (ours != f.ids[0]) {
                     ++differ_f32;
                     EXPECT_LT(f.logits[0] - f.logits[1], kF32NearTie) << at << ": ours " << ours;
                   }
                   if (ours != g.greedy_ids[i]) {
                     ++differ_q4;
                     EXPECT_LT(q.logits[0] - q.logits[1], kNearTie)
                         << at << ": ours " << ours << ", llama.cpp " << g.greedy_ids[i];
                   }
                 });
  std::printf(
      "[smollm2 f32 vs llama.cpp] %d positions; max |logit diff| over the top-k: %.4f vs "
      "llama.cpp F32, %.4f vs llama.cpp Q4_1; argmax differs at %d (F32) and %d (Q4_1) "
      "positions, all near-ties\n",
      positions, worst_f32, worst_q4, differ_f32, differ_q4);
  EXPECT_GT(positions, 300);
}

// The quantized path (--weight-format native) computes as llama.cpp's Q4_1 run does: 8-bit
// activations per 32-element block times the file's blocks. Its logits stay within a stated
// tolerance of our fp32 path (every vocabulary entry) and of both llama.cpp runs, and its argmax
// is llama.cpp's Q4_1 greedy token unless that is a near-tie. The tolerances are about 1.3x the
// figures measured (printed below; docs/performance.md), last set when the quantized matmuls
// moved to one float step per block (2026-11-30: before it 1.65, 0.98 and 1.97).
constexpr double kNativeVsF32Tolerance = 2.3;  // measured 1.78 (ours native vs ours f32)
constexpr double kNativeVsRefTolerance = 3.0;  // measured 1.34 (llama.cpp F32), 2.34 (Q4_1)

TEST(SmolLM2, NativeWeightsStayWithinToleranceOfF32AndLlamaCpp) {
  // Our fp32 logits at every position, to compare over the whole vocabulary.
  std::vector<std::vector<float>> f32_logits;
  teacher_forced(test::smollm2(), [&](const Golden&, std::size_t, int, std::span<const float> l) {
    f32_logits.emplace_back(l.begin(), l.end());
  });
  double worst_ours = 0.0, worst_f32 = 0.0, worst_q4 = 0.0;
  int positions = 0, differ_ours = 0, differ_q4 = 0;
  teacher_forced(test::smollm2_native(), [&](const Golden& g, std::size_t i, int pos,
                                             std::span<const float> logits) {
    const std::string at = where(g, pos);
    const std::vector<float>& ref = f32_logits.at(static_cast<std::size_t>(positions));
    double d = 0.0;
    for (std::size_t v = 0; v < ref.size(); ++v)
      d = std::max(d, double(std::fabs(logits[v] - ref[v])));
    worst_ours = std::max(worst_ours, d);
    worst_f32 = std::max(worst_f32, max_diff(logits, g.f32[i]));
    worst_q4 = std::max(worst_q4, max_diff(logits, g.q4[i]));
    EXPECT_LE(d, kNativeVsF32Tolerance) << at;
    EXPECT_LE(max_diff(logits, g.f32[i]), kNativeVsRefTolerance) << at;
    EXPECT_LE(max_diff(logits, g.q4[i]), kNativeVsRefTolerance) << at;
    const int ours = argmax(logits);
    differ_ours += ours != argmax(ref) ? 1 : 0;
    if (ours != g.greedy_ids[i]) {
      ++differ_q4;
      EXPECT_LT(g.q4[i].logits[0] - g.q4[i].logits[1], kNearTie)
          << at << ": ours " << ours << ", llama.cpp " << g.greedy_ids[i];
    }
    ++positions;
  });
  std::printf(
      "[smollm2 native] %d positions; max |logit diff|: %.4f vs our f32 (whole vocabulary), "
      "%.4f vs llama.cpp F32, %.4f vs llama.cpp Q4_1 (top-k); argmax differs from our f32 at %d "
      "and from llama.cpp Q4_1 at %d positions (all near-ties there)\n",
      positions, worst_ours, worst_f32, worst_q4, differ_ours, differ_q4);
  EXPECT_EQ(positions, static_cast<int>(f32_logits.size()));
  // Agreement with our own fp32 path on the greedy token: at least 95% of positions.
  EXPECT_LE(differ_ours * 20, positions);
}

// The chat path end to end: ChatML from the model's template, generation stops at <|im_end|>. On
// fp32 weights: the quantized path (ours and llama.cpp's alike) answers "L'Etoile, la
// Marseillaise, ..." to this prompt and does not stop (docs/performance.md).
TEST(SmolLM2, ChatAnswersAndStopsAtTheEndOfTurn) {
  const LoadedModel& m = test::smollm2();
  EXPECT_EQ(default_system_line(m.chat_template),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  GenerateOptions o;
  o.prompt = render_chatml(*m.tokenizer, default_system_line(m.chat_template),
                           "What is the capital of France?");
  o.echo_prompt = false;
  o.steps = 80;
  std::string answer;
  const GenerateResult r =
      generate(t, *m.tokenizer, o, [&](const std::string& piece) { answer += piece; });
  EXPECT_NE(answer.find("Paris"), std::string::npos) << answer;
  EXPECT_EQ(answer.find("<|im_"), std::string::npos) << answer;
  EXPECT_LT(static_cast<int>(r.tokens.size()), o.steps) << "did not stop at <|im_end|>";
}

}  // namespace
}  // namespace kvscope

// kvscope eval attention: the attention structure of the model on the windows, full fp32 cache
// (AttentionRecorder): mass on the k most recent tokens per layer, every sink found (threshold x
// the uniform share), and the share of each head's attention on position 0.
#include <algorithm>
#include <cstdio>

#include "cli/eval_input.h"
#include "cli/eval_verbs.h"
#include "engine/common/error.h"
#include "engine/evict/attention_stats.h"
#include "engine/infer/step_runner.h"

namespace kvscope::cli {
namespace {

// A sink must hold its share over many queries: with 16, a strongly local model flags every
// recent position (each is seen by a few nearby queries only).
constexpr int kSinkMinQueries = 128;
const std::vector<int> kRecent = {1, 2, 4, 8, 16, 32};

struct AttentionFigures {
  // [layer][k] mass on the kRecent[k] most recent tokens, averaged over heads and windows
  // (query-weighted per window by the recorder); position-0 strength per layer; every sink found.
  std::vector<std::vector<double>> local;
  std::vector<SinkReport> sinks;
  std::vector<double> pos0;
  // [layer][head] attention mass on position 0 summed over queries 1.. (query 0 sees only itself).
  std::vector<double> share0;
  long queries = 0, later_queries = 0;
};

AttentionFigures measure(Transformer& transformer, const std::vector<std::vector<int>>& windows,
                         double threshold) {
  const ModelConfig& c = transformer.config();
  AttentionFigures f;
  f.local.assign(static_cast<std::size_t>(c.n_layers), std::vector<double>(kRecent.size(), 0.0));
  f.pos0.assign(static_cast<std::size_t>(c.n_layers), 0.0);
  f.share0.assign(static_cast<std::size_t>(c.n_layers) * c.n_heads, 0.0);
  for (const auto& w : windows) {
    const int n = static_cast<int>(w.size());
    AttentionRecorder rec({c.n_layers, c.n_heads, n}, 0, 8);
    SoloSequence seq(kv_layout_for(c, 16, 1, KvFormat{}, KvFormat{}), n);
    for (int token : w) seq.step(transformer, token, &rec);
    for (int l = 0; l < c.n_layers; ++l) {
      for (std::size_t i = 0; i < kRecent.size(); ++i) {
        double m = 0.0;
        for (int h = 0; h < c.n_heads; ++h) m += rec.local_mass(l, h, kRecent[i]);
        f.local[static_cast<std::size_t>(l)][i] += m / c.n_heads * n;
      }
    }
    for (const SinkReport& s : rec.detect_sinks(0.0, 16)) {
      if (s.position == 0) f.pos0[static_cast<std::size_t>(s.layer)] += s.strength / c.n_heads * n;
    }
    for (const SinkReport& s : rec.detect_sinks(threshold, kSinkMinQueries)) f.sinks.push_back(s);
    for (int l = 0; l < c.n_layers; ++l) {
      for (int h = 0; h < c.n_heads; ++h) {
        f.share0[static_cast<std::size_t>(l) * c.n_heads + h] += rec.cumulative(l, h, 0) - 1.0;
      }
    }
    f.queries += n;
    f.later_queries += n - 1;
  }
  return f;
}

void print_locality(const AttentionFigures& f, const ModelConfig& c) {
  std::printf("| layer |");
  for (int k : kRecent) std::printf(" last %d |", k);
  std::printf(" position 0 strength |\n|---|");
  for (std::size_t i = 0; i <= kRecent.size(); ++i) std::printf("---:|");
  std::printf("\n");
  for (int l = 0; l < c.n_layers; ++l) {
    std::printf("| %d |", l);
    for (std::size_t i = 0; i < kRecent.size(); ++i)
      std::printf(" %.3f |", f.local[static_cast<std::size_t>(l)][i] / f.queries);
    std::printf(" %.2fx |\n", f.pos0[static_cast<std::size_t>(l)] / f.queries);
  }
  std::printf(
      "(mass on the k most recent tokens, itself included, mean over heads and queries; "
      "position 0 strength = its mean attention / the uniform share 1/keys, mean over heads)\n");
}

void print_sinks(std::vector<SinkReport> sinks, double threshold) {
  std::printf(
      "sinks (>= %.1fx the uniform share, mean over >= %d queries, per window and head): %zu\n",
      threshold, kSinkMinQueries, sinks.size());
  const int zero = static_cast<int>(std::count_if(
      sinks.begin(), sinks.end(), [](const SinkReport& s) { return s.position == 0; }));
  std::printf("  at position 0: %d; elsewhere: %zu", zero,
              sinks.size() - static_cast<std::size_t>(zero));
  std::sort(sinks.begin(), sinks.end(),
            [](const SinkReport& a, const SinkReport& b) { return a.strength > b.strength; });
  // The five strongest (layer, head, position), each named once (its strongest window).
  std::vector<const SinkReport*> strongest;
  for (const SinkReport& s : sinks) {
    if (strongest.size() == 5) break;
    const bool seen = std::any_of(strongest.begin(), strongest.end(), [&](const SinkReport* t) {
      return t->layer == s.layer && t->head == s.head && t->position == s.position;
    });
    if (!seen) strongest.push_back(&s);
  }
  for (std::size_t i = 0; i < strongest.size(); ++i) {
    std::printf("%s layer %d head %d position %d %.1fx", i == 0 ? "; strongest:" : ",",
                strongest[i]->layer, strongest[i]->head, strongest[i]->position,
                strongest[i]->strength);
  }
  std::printf("\n");
}

// Which heads are sinks: the share of each head's attention that goes to position 0.
void print_position0_share(const AttentionFigures& f, const ModelConfig& c) {
  std::printf("\nshare of attention on position 0 per head (mean over queries after the first):\n");
  std::printf("| layer |");
  for (int h = 0; h < c.n_heads; ++h) std::printf(" h%d |", h);
  std::printf(" heads >= 50%% |\n|---|");
  for (int h = 0; h <= c.n_heads; ++h) std::printf("---:|");
  std::printf("\n");
  int majority = 0, majority_first_two = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    std::printf("| %d |", l);
    int here = 0;
    for (int h = 0; h < c.n_heads; ++h) {
      const double s = f.share0[static_cast<std::size_t>(l) * c.n_heads + h] / f.later_queries;
      std::printf(" %.0f%% |", 100.0 * s);
      here += s >= 0.5;
    }
    std::printf(" %d |\n", here);
    majority += here;
    if (l < 2) majority_first_two += here;
  }
  std::printf(
      "heads putting at least half their attention on position 0: %d of %d (%d of them in "
      "layers 0-1)\n",
      majority, c.n_layers * c.n_heads, majority_first_two);
}

int run(const Args& args) {
  check_eval_input_flags(args);
  EvalModel m = load_eval_model(args);
  const EvalText text = read_eval_text(args, m);
  const double threshold = args.get_double("--sink-threshold", 4.0);
  if (!(threshold > 0.0))
    fail_expected("--sink-threshold", "a number > 0", args.get("--sink-threshold"));
  const ModelConfig& c = m.config();
  const AttentionFigures f = measure(*m.transformer, text.windows, threshold);
  std::printf(
      "attention structure: %s, %zu windows, %ld queries, full fp32 cache, %d layers x %d heads\n",
      text.source.c_str(), text.windows.size(), f.queries, c.n_layers, c.n_heads);
  print_locality(f, c);
  print_sinks(f.sinks, threshold);
  if (f.later_queries > 0) print_position0_share(f, c);
  return 0;
}

}  // namespace

const Subverb& eval_attention_verb() {
  static const Subverb verb{
      "attention",
      "attention structure on the windows (full cache): locality per layer, sinks",
      eval_value_flags({"--sink-threshold"}),
      {},
      eval_help(R"(usage: kvscope eval attention [options]

Attention structure of the model on the windows, full fp32 cache: the mass on the most recent
tokens per layer, the sinks (positions that draw far more than the uniform share), and the share
of each head's attention on position 0.

  --sink-threshold X         a sink draws at least X times the uniform share (default 4)
)"),
      run};
  return verb;
}

}  // namespace kvscope::cli

// kvscope bench evict: a sweep of token-eviction runs scored on the real model (what `eval
// evict-sweep`, `eval streaming` and the UI's quality panel do), run one at a time (one
// engine step per position of each run) against in lockstep (QualityEvaluator::evaluate_all: one
// step per position holding a token of every run, so the weights are read once per position).
// The two are interleaved within each repeat and must give the same figures, bit for bit.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli/args.h"
#include "cli/bench_verbs.h"
#include "cli/model_flags.h"
#include "cli/progress.h"
#include "engine/analysis/eviction_quality.h"
#include "engine/analysis/quality.h"
#include "engine/common/error.h"
#include "engine/common/text_lines.h"
#include "engine/infer/transformer.h"
#include "engine/model/locate.h"

namespace kvscope::cli {
namespace {

using Clock = std::chrono::steady_clock;

bool same_figures(const QualityReport& a, const QualityReport& b) {
  return a.positions == b.positions && a.ppl_variant == b.ppl_variant && a.kl_mean == b.kl_mean &&
         a.kl_max == b.kl_max && a.top1_agreement == b.top1_agreement;
}

// One repeat: every run alone, then all in lockstep; the seconds of each, after checking that
// both give the same figures.
std::pair<double, double> time_repeat(const QualityEvaluator& evaluator,
                                      const std::vector<EvictionRunOptions>& runs,
                                      Progress& progress, int r) {
  std::vector<QualityReport> alone;
  progress.step("repeat " + std::to_string(r + 1) + ", one at a time");
  auto start = Clock::now();
  for (const EvictionRunOptions& o : runs) {
    EvictionVariant v(o);
    alone.push_back(evaluator.evaluate(v));
    progress.update(static_cast<long>(alone.size()), static_cast<long>(runs.size()));
  }
  const double alone_s = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<std::unique_ptr<EvictionVariant>> variants;
  std::vector<CacheVariant*> all;
  for (const EvictionRunOptions& o : runs) {
    variants.push_back(std::make_unique<EvictionVariant>(o));
    all.push_back(variants.back().get());
  }
  progress.step("repeat " + std::to_string(r + 1) + ", in lockstep");
  start = Clock::now();
  const std::vector<QualityReport> together = evaluator.evaluate_all(all);
  const double together_s = std::chrono::duration<double>(Clock::now() - start).count();
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (!same_figures(alone[i], together[i])) {
      throw InternalError("bench evict", alone[i].variant +
                                             ": the lockstep run's figures differ from the "
                                             "run alone (they must be bit-identical)");
    }
  }
  return {alone_s, together_s};
}

}  // namespace

int bench_evict(const Args& args) {
  const int tokens = args.get_int("--tokens", 512);
  const int threads = args.get_int("--threads", 1);
  const int repeat = std::max(1, args.get_int("--repeat", 3));
  const std::vector<int> budgets =
      parse_int_list(args.get("--budgets", "16,32,64,128"), "--budgets", 2, 1 << 20,
                     "budgets of at least 2 tokens");
  LoadedModel loaded = load_model_flags(args);
  if (loaded.model->is_random_weights()) {
    throw Error(loaded.model->source(),
                "random weights: eviction policies that read attention need a trained model");
  }
  const ModelConfig& c = loaded.model->config();
  if (tokens < 2 || tokens > c.seq_len) {
    fail_expected("--tokens", "an integer in [2, " + std::to_string(c.seq_len) + "]",
                  std::to_string(tokens));
  }
  const std::string text_path = default_eval_text_path();
  std::vector<std::vector<int>> windows = long_text_windows(
      *loaded.tokenizer, read_text_file(text_path, "cannot open the eval text"), tokens, text_path);
  windows.resize(1);  // the text's first `tokens` tokens
  auto backend = make_cpu_backend(threads);
  Transformer t(loaded.model, *backend);
  const QualityEvaluator evaluator(t, windows, 16);
  const std::vector<EvictionRunOptions> runs = eviction_sweep_runs(16, budgets);
  const bool json = args.has("--json");
  if (!json) {
    std::fprintf(stderr,
                 "bench evict: %s, %d threads: %zu eviction runs x %zu positions (window, h2o, "
                 "h2o compacted at budgets %s), one at a time vs in lockstep, %d repeats\n",
                 loaded.model->source().c_str(), threads, runs.size(), windows[0].size() - 1,
                 args.get("--budgets", "16,32,64,128").c_str(), repeat);
  }
  std::vector<double> alone_s, together_s;
  {
    Progress progress("bench evict", 2 * repeat, "runs");
    for (int r = 0; r < repeat; ++r) {
      const auto [alone, together] = time_repeat(evaluator, runs, progress, r);
      alone_s.push_back(alone);
      together_s.push_back(together);
    }
  }
  std::sort(alone_s.begin(), alone_s.end());
  std::sort(together_s.begin(), together_s.end());
  const double a = alone_s[alone_s.size() / 2], b = together_s[together_s.size() / 2];
  const double positions = static_cast<double>(runs.size()) * (windows[0].size() - 1);
  if (json) {
    const nlohmann::json j = {{"model", loaded.model->source()},
                              {"threads", threads},
                              {"runs", runs.size()},
                              {"positions_per_run", windows[0].size() - 1},
                              {"one_at_a_time_s", a},
                              {"lockstep_s", b},
                              {"speedup", a / b}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("  one at a time  median %.2f s (%.1f positions/s)\n", a, positions / a);
  std::printf("  in lockstep    median %.2f s (%.1f positions/s)\n", b, positions / b);
  std::printf("  lockstep / one at a time: %.2fx faster, figures bit-identical\n", a / b);
  return 0;
}

const Subverb& bench_evict_verb() {
  static const Subverb verb{
      "evict",
      "an eviction sweep run one at a time vs in lockstep, same figures",
      {"--model", "--tokenizer", "--tokens", "--budgets", "--threads", "--repeat"},
      {"--json"},
      R"(usage: kvscope bench evict [options]

An eviction sweep scored on the real model (window, h2o, h2o compacted at each budget, as the
UI's quality panel runs it), one run at a time against all in lockstep (one engine step per
position for every run), interleaved; the two must give the same figures, bit for bit.

  --model PATH|NAME          model (default stories260K.bin)
  --tokenizer PATH           tokenizer (default: found beside the model)
  --tokens N                 tokens of the eval text (default 512)
  --budgets LIST             budgets (default 16,32,64,128)
  --threads T                CPU threads (default 1)
  --repeat R                 interleaved repeats (default 3)
  --json                     print the figures as JSON
)",
      bench_evict};
  return verb;
}

}  // namespace kvscope::cli

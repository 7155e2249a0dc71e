// kvscope eval evict / evict-sweep / streaming: token eviction measured on the real model against
// the full fp32 cache (perplexity, KL, top-1 agreement, peak KV bytes), one policy or a sweep over
// policies x budgets written as CSV + PNG.
#pragma once

#include <string>

#include "cli/args.h"
#include "cli/eval_input.h"
#include "engine/analysis/eviction_quality.h"

namespace kvscope::cli {

// The eviction flags (cli/eviction_flags.h; the policy is --policy, default window) and
// --context as run options over K/V formats `k`, `v` and `block_size`.
EvictionRunOptions parse_eviction_options(const Args& args, const KvFormat& k, const KvFormat& v,
                                          int block_size);

struct EvictEvalSetup {
  std::string source;   // where the windows came from
  int max_window = 0;   // longest window (tokens)
  int bucket_size = 0;  // > 0: per-position-bucket figures (long texts)
  int seq_len = 0;      // the model's trained context
  bool json = false;
};

// What eval evict, evict-sweep and streaming share: K/V formats (fp32 unless given, so the loss is
// eviction's alone), the eviction flags checked before the model loads, the windows, --bucket
// (default 256 with --long) and the fp32 reference run.
struct EvictRun {
  EvalModel model;
  EvictionRunOptions options;
  std::unique_ptr<QualityEvaluator> evaluator;
  EvictEvalSetup setup;
};
EvictRun prepare_evict_run(const Args& args);

// One policy: a report on stdout. Returns the exit code.
int run_evict_eval(const QualityEvaluator& evaluator, const EvictionRunOptions& options,
                   const EvictEvalSetup& setup);
// Every policy x every budget in `budgets` ("16,32,64"): table on stdout, <out>/evict_sweep.csv,
// <out>/evict_kl.png and <out>/evict_ppl.png. Returns the exit code.
int run_evict_sweep(const QualityEvaluator& evaluator, const EvictionRunOptions& base,
                    const std::string& budgets, const EvictEvalSetup& setup,
                    const std::string& out_dir);

// StreamingLLM's Table 2 on this model: window attention and 1/2/4/8 sink tokens + window at each
// budget in `budgets`, with positions assigned within the cache (as the paper does; keys
// re-rotated) and with original positions: table on stdout, <out>/streaming.csv (the eviction
// sweep schema) and <out>/streaming_ppl.png. Returns the exit code.
int run_streaming_sweep(const QualityEvaluator& evaluator, const EvictionRunOptions& base,
                        const std::string& budgets, const EvictEvalSetup& setup,
                        const std::string& out_dir);

}  // namespace kvscope::cli

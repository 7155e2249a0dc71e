// kvscope eval streaming: StreamingLLM's Table 2 on the model, window attention and 1/2/4/8
// sinks + window per budget, positions in the cache and original (the run is eval_evict.cpp).
#include "cli/eval_evict.h"
#include "cli/eval_verbs.h"

namespace kvscope::cli {
namespace {

int run(const Args& args) {
  const EvictRun r = prepare_evict_run(args);
  return run_streaming_sweep(*r.evaluator, r.options, args.get("--budgets", "256,512"), r.setup,
                             args.get("--out", "reports/streaming"));
}

}  // namespace

const Subverb& eval_streaming_verb() {
  static const Subverb verb{
      "streaming",
      "StreamingLLM's Table 2: window vs 1/2/4/8 sinks per budget (use --long 2048+)",
      eval_value_flags({"--budgets", "--compact", "--context", "--bucket", "--kv-dtype",
                        "--k-dtype", "--v-dtype", "--block-size", "--out"}),
      {"--json"},
      eval_help(R"(usage: kvscope eval streaming [options]

StreamingLLM's Table 2 on this model: window attention and 1/2/4/8 sinks + window per budget,
positions in the cache (the paper's) and original; <out>/streaming.csv and streaming_ppl.png,
with --long also streaming_positions.csv/png (use --long 2048 or more).

  --budgets LIST             cache budgets (default 256,512)
  --compact never|half|always  compaction of partially emptied blocks (default never)
  --context C                compress after C prompt tokens, then continue (kvpress)
  --bucket B                 per-position figures in buckets of B (default 256 with --long)
  --kv-dtype F               K and V format (default fp32)
  --k-dtype F, --v-dtype F   separate K and V formats
  --block-size B             KV block size in tokens (default 16)
  --out DIR                  where the CSV and plots go (default reports/streaming)
  --json                     print the reports as JSON
)"),
      run};
  return verb;
}

}  // namespace kvscope::cli

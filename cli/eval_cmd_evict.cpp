// kvscope eval evict: one token-eviction policy on the real model against the full fp32 cache
// (the run itself is eval_evict.cpp).
#include "cli/eval_evict.h"
#include "cli/eval_verbs.h"

namespace kvscope::cli {
namespace {

int run(const Args& args) {
  const EvictRun r = prepare_evict_run(args);
  return run_evict_eval(*r.evaluator, r.options, r.setup);
}

}  // namespace

const Subverb& eval_evict_verb() {
  static const Subverb verb{
      "evict",
      "one token-eviction policy vs the full cache: perplexity, KL, peak KV bytes",
      eval_value_flags({"--policy", "--budget", "--sinks", "--recent", "--obs-window", "--compact",
                        "--positions", "--context", "--bucket", "--kv-dtype", "--k-dtype",
                        "--v-dtype", "--block-size"}),
      {"--json"},
      eval_help(R"(usage: kvscope eval evict [--policy P] [options]

One token-eviction policy against the full fp32 cache on the same windows: perplexity, KL,
top-1 agreement, peak KV bytes, tokens evicted (K/V fp32 unless --kv-dtype is given, so the
loss is eviction's alone).

  --policy POLICY            window | sinks | h2o | snapkv | tova | random (default window)
  --budget N                 tokens each query attends to, itself included (default 64)
  --sinks S                  sinks: first tokens always kept (default 4)
  --recent R                 h2o: recent window (default budget / 2)
  --obs-window W             snapkv: last queries that vote (default 8)
  --compact never|half|always  compaction of partially emptied blocks (default never)
  --positions keep|shift     keep original RoPE positions (default) or shift them contiguous
                             (re-rotating cached keys, llama.cpp's context shift)
  --context C                compress after C prompt tokens, then continue (kvpress); only
                             positions >= C are scored; snapkv then compresses only once
  --bucket B                 per-position figures in buckets of B (default 256 with --long)
  --kv-dtype F               K and V format (default fp32)
  --k-dtype F, --v-dtype F   separate K and V formats
  --block-size B             KV block size in tokens (default 16)
  --json                     print the report as JSON
)"),
      run};
  return verb;
}

}  // namespace kvscope::cli

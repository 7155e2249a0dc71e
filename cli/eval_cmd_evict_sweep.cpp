// kvscope eval evict-sweep: every eviction policy at every budget, all runs in lockstep against
// the full fp32 cache; a table, evict_sweep.csv, evict_kl.png and evict_ppl.png.
#include "cli/eval_evict.h"
#include "cli/eval_verbs.h"

namespace kvscope::cli {
namespace {

int run(const Args& args) {
  const EvictRun r = prepare_evict_run(args);
  return run_evict_sweep(*r.evaluator, r.options, args.get("--budgets", "16,32,64,128,256"),
                         r.setup, args.get("--out", "reports/evict"));
}

}  // namespace

const Subverb& eval_evict_sweep_verb() {
  static const Subverb verb{
      "evict-sweep",
      "every eviction policy x every budget: evict_sweep.csv, evict_kl.png, evict_ppl.png",
      eval_value_flags({"--budgets", "--sinks", "--recent", "--obs-window", "--compact",
                        "--positions", "--context", "--bucket", "--kv-dtype", "--k-dtype",
                        "--v-dtype", "--block-size", "--out"}),
      {"--json"},
      eval_help(R"(usage: kvscope eval evict-sweep [options]

Every eviction policy (window sinks h2o snapkv tova random) at every budget against the full fp32
cache, all runs in lockstep: a table, <out>/evict_sweep.csv, evict_kl.png and evict_ppl.png.

  --budgets LIST             budgets (default 16,32,64,128,256)
  --sinks S                  sinks: first tokens always kept (default 4)
  --recent R                 h2o: recent window (default budget / 2)
  --obs-window W             snapkv: last queries that vote (default 8)
  --compact never|half|always  compaction of partially emptied blocks (default never)
  --positions keep|shift     keep original RoPE positions (default) or shift them contiguous
  --context C                compress after C prompt tokens, then continue (kvpress)
  --bucket B                 per-position figures in buckets of B (default 256 with --long)
  --kv-dtype F               K and V format (default fp32)
  --k-dtype F, --v-dtype F   separate K and V formats
  --block-size B             KV block size in tokens (default 16)
  --out DIR                  where the CSV and plots go (default reports/evict)
  --json                     print the reports as JSON
)"),
      run};
  return verb;
}

}  // namespace kvscope::cli

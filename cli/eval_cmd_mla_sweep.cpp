// kvscope eval mla-sweep: MLA modes A and B over ranks, with every KV format on the same plots
// (the sweep itself is eval_mla.cpp).
#include "cli/eval_input.h"
#include "cli/eval_report.h"
#include "cli/eval_verbs.h"

namespace kvscope::cli {
namespace {

int run(const Args& args) {
  check_eval_input_flags(args);
  const int block_size = eval_block_size(args);
  EvalModel m = load_eval_model(args);
  EvalText text = read_eval_text(args, m);
  const std::string source = text.source;
  const MlaSweepChoice choice{args.get("--mla-series", ""), args.get("--mla-ranks", "")};
  check_mla_sweep_choice(choice, m.config());  // before the long runs
  const auto evaluator = run_reference(m, text, block_size);
  return run_mla_sweep(*evaluator, *m.loaded.model, block_size, choice, source,
                       args.get("--out", "reports/mla"), args.has("--json"));
}

}  // namespace

const Subverb& eval_mla_sweep_verb() {
  static const Subverb verb{
      "mla-sweep",
      "MLA ranks (modes a and b) beside every format: mla_sweep.csv and plots",
      eval_value_flags({"--mla-series", "--mla-ranks", "--block-size", "--out"}),
      {"--json"},
      eval_help(R"(usage: kvscope eval mla-sweep [options]

MLA latent caches over ranks (mode a, mode b) and every KV format against the exact fp32 cache:
<out>/mla_sweep.csv, mla_pareto_kl.png and mla_pareto_ppl.png (quality vs bytes per token).

  --mla-series LIST          the series: a (fp32 latents), a-fp16, bD (mode b, D rotary dims
                             per KV head, fastest pairs), bD-norm (pairs by weight norm);
                             default a,a-fp16 and b with head_dim-2, head_dim/2, 2 and 2-norm
  --mla-ranks LIST           ranks for every series, or 'full' (default: eighths of each
                             series' full rank)
  --block-size B             KV block size in tokens (default 16)
  --out DIR                  where the CSV and plots go (default reports/mla)
  --json                     print the reports as JSON
)"),
      run};
  return verb;
}

}  // namespace kvscope::cli

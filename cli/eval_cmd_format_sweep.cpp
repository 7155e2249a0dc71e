// kvscope eval format-sweep: every KV format of the ladder against fp32 on the same windows; a
// table, quant_sweep.csv and the Pareto plots of quality loss against bytes per token.
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
  const auto evaluator = run_reference(m, text, block_size);
  return run_sweep(*evaluator, m.config(), block_size, source, args.get("--out", "reports/quant"),
                   args.has("--json"));
}

}  // namespace

const Subverb& eval_format_sweep_verb() {
  static const Subverb verb{
      "format-sweep",
      "every KV format vs fp32: quant_sweep.csv and Pareto plots (quality vs bytes/token)",
      eval_value_flags({"--block-size", "--out"}),
      {"--json"},
      eval_help(R"(usage: kvscope eval format-sweep [options]

Every KV format (fp32 fp16 bf16 fp8 int8 int4 int2 KIVI ...) against the exact fp32 cache on the
same windows: a table, <out>/quant_sweep.csv, quant_pareto_kl.png and quant_pareto_ppl.png.

  --block-size B             KV block size in tokens (default 16)
  --out DIR                  where the CSV and plots go (default reports/quant)
  --json                     print the reports as JSON
)"),
      run};
  return verb;
}

}  // namespace kvscope::cli

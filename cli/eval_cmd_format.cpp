// kvscope eval format: one KV format (or a K format and a V format) against the exact fp32 cache:
// perplexity, KL divergence, top-1 agreement and exact bytes per token.
#include "cli/eval_input.h"
#include "cli/eval_report.h"
#include "cli/eval_verbs.h"

namespace kvscope::cli {
namespace {

int run(const Args& args) {
  check_eval_input_flags(args);
  const int block_size = eval_block_size(args);
  const KvFormatPair f = eval_kv_formats(args, "fp16");
  EvalModel m = load_eval_model(args);
  validate_kv_formats(args, f, block_size, m.config());
  EvalText text = read_eval_text(args, m);
  const std::string source = text.source;
  const auto evaluator = run_reference(m, text, block_size);
  const auto variant = make_kv_format_variant(f.k, f.v, block_size);
  return report_one_variant(*evaluator, *variant, *m.loaded.model, source, block_size, nullptr,
                            args.has("--json"));
}

}  // namespace

const Subverb& eval_format_verb() {
  static const Subverb verb{
      "format",
      "one KV format vs the fp32 cache: perplexity, KL, top-1 agreement, bytes/token",
      eval_value_flags({"--kv-dtype", "--k-dtype", "--v-dtype", "--block-size"}),
      {"--json"},
      eval_help(R"(usage: kvscope eval format [options]

One KV cache format against the exact fp32 cache on the same windows: perplexity, KL divergence,
top-1 agreement and exact bytes per token.

  --kv-dtype F               K and V format (default fp16)
  --k-dtype F, --v-dtype F   separate K and V formats
  --block-size B             KV block size in tokens (default 16)
  --json                     print the report as JSON

formats: fp32 fp16 bf16 fp8-e4m3 fp8-e5m2 int8 int4[-gN] int2[-gN] kivi2[-rN][-gN] kivi4[-rN][-gN]
)"),
      run};
  return verb;
}

}  // namespace kvscope::cli

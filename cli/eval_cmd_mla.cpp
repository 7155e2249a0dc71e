// kvscope eval mla: the model's K/V projections factorized by SVD to a latent cache of one rank
// (MLA mode A or B) against the exact fp32 cache.
#include "cli/eval_input.h"
#include "cli/eval_report.h"
#include "cli/eval_verbs.h"
#include "engine/common/error.h"
#include "engine/common/setting_source.h"
#include "engine/mla/mla_codec.h"

namespace kvscope::cli {
namespace {

std::shared_ptr<const MlaCodec> make_codec(const Args& args, const Model& model) {
  MlaOptions o;
  o.mode = parse_mla_mode(args.get("--mla-mode", "a"), "--mla-mode");
  o.rank = args.get_int("--mla-rank", 0);
  o.rope_dims = args.get_int("--mla-rope-dims", o.mode == MlaMode::kAbsorbed ? 2 : 0);
  o.rope_select =
      parse_rope_select(args.get("--mla-rope-select", "high-freq"), "--mla-rope-select");
  return std::make_shared<const MlaCodec>(
      with_setting_sources({{kMlaRank, "--mla-rank"}, {kMlaRopeDims, "--mla-rope-dims"}},
                           [&] { return make_mla_codec(model, o); }));
}

int run(const Args& args) {
  check_eval_input_flags(args);
  if (!args.has("--mla-rank"))
    fail_expected("--mla-rank", "the latent rank R (eval mla needs it)", "none");
  const int block_size = eval_block_size(args);
  const KvFormat k = parse_kv_format(args.get("--kv-dtype", "fp32"), "--kv-dtype");
  EvalModel m = load_eval_model(args);
  const auto codec = make_codec(args, *m.loaded.model);
  // Throws naming --kv-dtype when the format cannot store this latent shape.
  const KvLayout L = mla_layout_for(m.config(), *codec, block_size, 1, k);
  for (KvKind kind : {KvKind::kKey, KvKind::kValue})
    k.validate(block_size, L.row_heads(kind), L.row_head_dim(kind), "--kv-dtype");
  EvalText text = read_eval_text(args, m);
  const std::string source = text.source;
  const auto evaluator = run_reference(m, text, block_size);
  const auto variant = make_mla_variant(codec, k, block_size);
  return report_one_variant(*evaluator, *variant, *m.loaded.model, source, block_size, codec.get(),
                            args.has("--json"));
}

}  // namespace

const Subverb& eval_mla_verb() {
  static const Subverb verb{
      "mla",
      "the K/V projections as an MLA latent cache of rank R vs the fp32 cache",
      eval_value_flags({"--mla-rank", "--mla-mode", "--mla-rope-dims", "--mla-rope-select",
                        "--kv-dtype", "--block-size"}),
      {"--json"},
      eval_help(R"(usage: kvscope eval mla --mla-rank R [options]

The model converted to an MLA latent cache (its K/V projections factorized by SVD) against the
exact fp32 cache: perplexity, KL divergence, top-1 agreement, bytes per token, energy kept.

  --mla-rank R               latent rank R (required)
  --mla-mode a|b             a: rebuild K/V from latents (exact at full rank, default);
                             b: absorbed attention on latents with decoupled RoPE
  --mla-rope-dims D          mode b: rotary dims kept per KV head (even, default 2)
  --mla-rope-select S        mode b: high-freq (default) or norm (largest |W_q| x |W_k| pairs)
  --kv-dtype F               the latents' format (default fp32)
  --block-size B             KV block size in tokens (default 16)
  --json                     print the report as JSON
)"),
      run};
  return verb;
}

}  // namespace kvscope::cli

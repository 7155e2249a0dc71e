// kvscope eval: quality of KV cache formats on the real model against the exact fp32 cache
// (perplexity, KL divergence, top-1 agreement, exact bytes per token); --sweep runs every format
// and writes the Pareto view as CSV and PNG; --mla-rank converts the model to an MLA latent cache
// and --mla-sweep runs MLA ranks and modes beside the formats.
#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/backend_flag.h"
#include "cli/commands.h"
#include "cli/eval_channels.h"
#include "cli/eval_evict.h"
#include "cli/eval_report.h"
#include "cli/format.h"
#include "cli/model_flags.h"
#include "cli/progress.h"
#include "engine/analysis/quality.h"
#include "engine/backend/cpu/quant_matmul.h"
#include "engine/common/error.h"
#include "engine/common/setting_source.h"
#include "engine/common/text_lines.h"
#include "engine/mla/mla_codec.h"
#include "engine/model/locate.h"

namespace kvscope::cli {
namespace {

constexpr const char* kHelp = R"(usage: kvscope eval [options]

  --model PATH|NAME          model (default stories260K.bin; random-weight models are refused)
  --tokenizer PATH           tokenizer (default: found beside the model)
  --text FILE                stories separated by blank lines (default assets/text/eval_stories.txt)
  --sample N                 instead of a text: N tokens sampled from the model (temperature 1)
  --seed S                   seed for --sample (default 1234)
  --kv-dtype F               K and V format (default fp16)
  --k-dtype F, --v-dtype F   separate K and V formats
  --block-size B             KV block size in tokens (default 16)
  --threads N                CPU threads (default: all cores)
  --weight-format native|f32 GGUF weights: native = matmuls on the quantized blocks (default),
                             f32 = dequantized at load (the accuracy reference)
%BACKEND%
  --json                     print the report as JSON
  --sweep                    evaluate every format; writes quant_sweep.csv and PNG plots
  --out DIR                  where --sweep writes (default reports/quant, reports/evict,
                             reports/mla)
  --long N                   concatenate the stories (BOS between them) into windows of N tokens
                             (N may exceed the model's seq_len: the reference there is dense
                             attention past the trained context); reports per-position buckets
  --bucket B                 bucket size for per-position figures (default 256 with --long)

token eviction (K/V fp32 unless --kv-dtype is given, so the loss is eviction's alone):
  --evict POLICY             window | sinks | h2o | snapkv | tova | random
  --budget N                 tokens each query attends to, itself included (default 64)
  --sinks S                  sinks: first tokens always kept (default 4)
  --recent R                 h2o: recent window (default budget / 2)
  --obs-window W             snapkv: last queries that vote (default 8)
  --compact never|half|always  compaction of partially emptied blocks (default never)
  --positions keep|shift     keep original RoPE positions (default) or shift them contiguous
                             (re-rotating cached keys, llama.cpp's context shift)
  --context C                compress after C prompt tokens, then continue (kvpress); only
                             positions >= C are scored; snapkv then compresses only once
  --sweep-evict              every policy x every budget: evict_sweep.csv, evict_kl.png,
                             evict_ppl.png
  --budgets LIST             budgets for --sweep-evict (default 16,32,64,128,256) or
                             --streaming (default 256,512)
  --streaming                StreamingLLM's Table 2: window attention and 1/2/4/8 sinks +
                             window per budget, positions in the cache (the paper's) and
                             original; streaming.csv + streaming_ppl.png (use --long 2048+)
  --attention                attention structure on the windows (full cache): mass on the most
                             recent tokens per layer, sinks (--sink-threshold X, default 4)
  --key-channels             KIVI's outlier channels: per layer, how far the largest key and
                             value channel stand out (mean |x| over the median channel);
                             key_channels.csv + key_channels.png for --layer L (default: the
                             layer whose keys stand out most) in --out (default reports/kivi)

MLA latent cache (the K/V projections factorized by SVD):
  --mla-rank R               latent rank R; latents in --kv-dtype, default fp32 here
  --mla-mode a|b             a: rebuild K/V from latents (exact at full rank, default);
                             b: absorbed attention on latents with decoupled RoPE
  --mla-rope-dims D          mode b: rotary dims kept per KV head (even, default 2)
  --mla-rope-select S        mode b: high-freq (default) or norm (largest |W_q| x |W_k| pairs)
  --mla-sweep                MLA ranks (mode a, mode b) and every format; writes mla_sweep.csv
                             and PNG plots of quality vs bytes per token
  --mla-series LIST          the sweep's series: a (fp32 latents), a-fp16, bD (mode b, D rotary
                             dims per KV head, fastest pairs), bD-norm (pairs by weight norm);
                             default a,a-fp16 and b with head_dim-2, head_dim/2, 2 and 2-norm
  --mla-ranks LIST           ranks for every series, or 'full' (default: eighths of each
                             series' full rank)

formats: fp32 fp16 bf16 fp8-e4m3 fp8-e5m2 int8 int4[-gN] int2[-gN] kivi2[-rN][-gN] kivi4[-rN][-gN]
)";

// Which flags go together. A rule fires when `flag` is given and any of `others` is (kConflicts)
// or none of them is (kNeeds); the first rule that fires is the error, named after `flag`.
struct FlagRule {
  enum Kind { kConflicts, kNeeds } kind;
  const char* flag;
  std::initializer_list<const char*> others;
  const char* message;
};

constexpr const char* kEvictFlags[] = {"--budget",  "--sinks",     "--recent",  "--obs-window",
                                       "--compact", "--positions", "--context", "--bucket"};

void check_flag_rules(const Args& args) {
  using K = FlagRule::Kind;
  static const FlagRule kRules[] = {
      {K::kConflicts, "--sample", {"--text"}, "give either --text or --sample, not both"},
      {K::kConflicts,
       "--kv-dtype",
       {"--k-dtype", "--v-dtype"},
       "give either --kv-dtype or --k-dtype/--v-dtype, not both"},
      {K::kNeeds, "--mla-mode", {"--mla-rank"}, "needs --mla-rank R"},
      {K::kNeeds, "--mla-rope-dims", {"--mla-rank"}, "needs --mla-rank R"},
      {K::kNeeds, "--mla-rope-select", {"--mla-rank"}, "needs --mla-rank R"},
      {K::kNeeds, "--mla-series", {"--mla-sweep"}, "only applies with --mla-sweep"},
      {K::kNeeds, "--mla-ranks", {"--mla-sweep"}, "only applies with --mla-sweep"},
      {K::kConflicts,
       "--mla-rank",
       {"--sweep", "--mla-sweep"},
       "give either --mla-rank or a sweep, not both"},
      {K::kConflicts, "--mla-sweep", {"--sweep"}, "give either --sweep or --mla-sweep, not both"},
      {K::kConflicts,
       "--mla-rank",
       {"--k-dtype", "--v-dtype"},
       "latents have one format: use --kv-dtype, not --k-dtype/--v-dtype"},
      {K::kConflicts,
       "--sweep",
       {"--evict", "--sweep-evict"},
       "give either --sweep (formats) or --evict/--sweep-evict, not both"},
      {K::kConflicts, "--long", {"--sample"}, "applies to --text windows, not --sample"},
      {K::kNeeds,
       "--budgets",
       {"--sweep-evict", "--streaming"},
       "only applies with --sweep-evict or --streaming"},
      {K::kConflicts,
       "--streaming",
       {"--evict", "--sweep-evict", "--sweep", "--mla-sweep", "--mla-rank", "--attention"},
       "runs its own policies: give it without --evict, --sweep-evict, --sweep, --mla-* or "
       "--attention"},
      {K::kConflicts,
       "--evict",
       {"--sweep-evict"},
       "give either --evict or --sweep-evict, not both"},
      {K::kConflicts,
       "--mla-sweep",
       {"--evict", "--sweep-evict", "--attention"},
       "give either --mla-sweep or --evict/--sweep-evict/--attention"},
      {K::kConflicts,
       "--mla-rank",
       {"--evict", "--sweep-evict", "--attention"},
       "MLA is not combined with --evict, --sweep-evict or --attention yet"},
      {K::kConflicts,
       "--key-channels",
       {"--evict", "--sweep-evict", "--streaming", "--sweep", "--mla-sweep", "--mla-rank",
        "--attention", "--kv-dtype", "--k-dtype", "--v-dtype"},
       "measures the model's own K/V (fp32 cache): give it without eviction, sweeps, MLA or "
       "formats"},
      {K::kNeeds, "--layer", {"--key-channels"}, "only applies with --key-channels"},
  };
  for (const char* flag : kEvictFlags) {
    if (args.has(flag) && !args.has("--evict") && !args.has("--sweep-evict") &&
        !args.has("--streaming"))
      throw Error(flag, "only applies with --evict, --sweep-evict or --streaming");
  }
  for (const FlagRule& r : kRules) {
    if (!args.has(r.flag)) continue;
    bool any = false;
    for (const char* o : r.others) any = any || args.has(o);
    if (any == (r.kind == K::kConflicts)) throw Error(r.flag, r.message);
  }
}

}  // namespace

int cmd_eval(const Argv& argv) {
  Args args(argv,
            {"--model",
             "--tokenizer",
             "--text",
             "--sample",
             "--seed",
             "--kv-dtype",
             "--k-dtype",
             "--v-dtype",
             "--block-size",
             "--threads",
             "--out",
             "--long",
             "--bucket",
             "--evict",
             "--budget",
             "--sinks",
             "--recent",
             "--obs-window",
             "--compact",
             "--positions",
             "--context",
             "--budgets",
             "--sink-threshold",
             "--mla-rank",
             "--mla-mode",
             "--mla-rope-dims",
             "--mla-rope-select",
             "--mla-series",
             "--mla-ranks",
             "--weight-format",
             "--backend",
             "--device-weights",
             "--layer"},
            {"--help", "--json", "--sweep", "--sweep-evict", "--attention", "--mla-sweep",
             "--streaming", "--key-channels"});
  if (args.has("--help")) {
    std::fputs(with_backend_help(kHelp).c_str(), stdout);
    return 0;
  }
  if (!args.positional().empty())
    throw Error(args.positional()[0], "unexpected argument; see --help");
  check_flag_rules(args);
  const bool mla = args.has("--mla-rank");
  const int block_size = args.get_int("--block-size", 16);
  if (block_size < 1 || block_size > 256 || (block_size & (block_size - 1)) != 0) {
    fail_expected("--block-size", "a power of two in [1, 256]", std::to_string(block_size));
  }
  const int threads = args.get_int("--threads", 0);
  if (threads < 0) fail_expected("--threads", "a non-negative integer", std::to_string(threads));
  const bool evicting = args.has("--evict") || args.has("--sweep-evict") || args.has("--streaming");
  const std::string default_kv = args.get("--kv-dtype", evicting || mla ? "fp32" : "fp16");
  const KvFormat k = parse_kv_format(args.get("--k-dtype", default_kv),
                                     args.has("--k-dtype") ? "--k-dtype" : "--kv-dtype");
  const KvFormat v = parse_kv_format(args.get("--v-dtype", default_kv),
                                     args.has("--v-dtype") ? "--v-dtype" : "--kv-dtype");
  // The eviction flags before any model loads: a bad value fails now, not after the reference.
  std::optional<EvictionRunOptions> eviction;
  if (evicting) eviction = parse_eviction_options(args, k, v, block_size);

  LoadedModel loaded = load_model_flags(
      args, WeightStorage::kMapped,
      parse_weight_format(args.get("--weight-format", "native"), "--weight-format"));
  if (loaded.model->is_random_weights()) {
    throw Error(loaded.model->source(),
                "random weights: no quality figure is meaningful; use a trained model");
  }
  RunNeeds needs;
  needs.model = loaded.model.get();
  auto backend = make_backend(args.get("--backend", "auto"), threads,
                              args.get("--device-weights", "f16"), needs);
  Transformer transformer(loaded.model, *backend);
  const ModelConfig& c = transformer.config();
  std::shared_ptr<const MlaCodec> codec;
  if (mla) {
    MlaOptions o;
    o.mode = parse_mla_mode(args.get("--mla-mode", "a"), "--mla-mode");
    o.rank = args.get_int("--mla-rank", 0);
    o.rope_dims = args.get_int("--mla-rope-dims", o.mode == MlaMode::kAbsorbed ? 2 : 0);
    o.rope_select =
        parse_rope_select(args.get("--mla-rope-select", "high-freq"), "--mla-rope-select");
    codec = std::make_shared<const MlaCodec>(
        with_setting_sources({{kMlaRank, "--mla-rank"}, {kMlaRopeDims, "--mla-rope-dims"}},
                             [&] { return make_mla_codec(*loaded.model, o); }));
    // Throws naming --kv-dtype when the format cannot store this latent shape.
    const KvLayout L = mla_layout_for(c, *codec, block_size, 1, k);
    k.validate(block_size, L.row_heads(KvKind::kKey), L.row_head_dim(KvKind::kKey), "--kv-dtype");
    k.validate(block_size, L.row_heads(KvKind::kValue), L.row_head_dim(KvKind::kValue),
               "--kv-dtype");
  } else {
    k.validate(block_size, c.n_kv_heads, c.head_dim(),
               args.has("--k-dtype") ? "--k-dtype" : "--kv-dtype");
    v.validate(block_size, c.n_kv_heads, c.head_dim(),
               args.has("--v-dtype") ? "--v-dtype" : "--kv-dtype");
  }

  std::vector<std::vector<int>> windows;
  std::string source;
  if (args.has("--sample")) {
    const long n = args.get_i64("--sample", 0);
    if (n < 2 || n > 10'000'000)
      fail_expected("--sample", "a token count in [2, 10000000]", std::to_string(n));
    const auto seed = static_cast<std::uint64_t>(args.get_i64("--seed", 1234));
    windows = sample_windows(transformer, n, seed);
    source =
        "sampled " + std::to_string(n) + " tokens, temperature 1, seed " + std::to_string(seed);
  } else {
    if (!loaded.tokenizer)
      throw Error(loaded.model->source(), "no tokenizer found; pass --tokenizer PATH");
    const std::string path = args.get("--text", default_eval_text_path());
    if (args.has("--long")) {
      const int len = args.get_int("--long", 0);
      if (len < 2 || len > 1'000'000) {
        fail_expected("--long", "a window length in [2, 1000000] tokens", std::to_string(len));
      }
      windows = long_text_windows(
          *loaded.tokenizer, read_text_file(path, "cannot open the text file (--text)"), len, path);
    } else {
      windows =
          text_windows(*loaded.tokenizer,
                       read_text_file(path, "cannot open the text file (--text)"), c.seq_len, path);
    }
    source = path;
  }
  int max_window = 0;
  for (const auto& w : windows) max_window = std::max(max_window, static_cast<int>(w.size()));
  const int bucket = args.get_int("--bucket", args.has("--long") ? 256 : 0);
  if (bucket < 0) fail_expected("--bucket", "an integer >= 0", std::to_string(bucket));

  if (args.has("--key-channels")) {
    const int layer = args.get_int("--layer", -1);
    if (args.has("--layer") && layer < 0)
      fail_expected("--layer", "a layer index >= 0", args.get("--layer"));
    return run_key_channels(loaded.model, *backend, windows, source, layer,
                            args.get("--out", "reports/kivi"), args.has("--json"));
  }
  if (args.has("--attention")) {
    const double threshold = args.get_double("--sink-threshold", 4.0);
    if (!(threshold > 0.0))
      fail_expected("--sink-threshold", "a number > 0", args.get("--sink-threshold"));
    return run_attention_report(transformer, windows, source, threshold);
  }
  const MlaSweepChoice mla_choice{args.get("--mla-series", ""), args.get("--mla-ranks", "")};
  if (args.has("--mla-sweep")) check_mla_sweep_choice(mla_choice, c);  // before the long runs
  std::unique_ptr<QualityEvaluator> evaluator;
  {
    Progress progress("eval", 1, "positions");
    progress.step("fp32 reference");
    evaluator =
        std::make_unique<QualityEvaluator>(transformer, std::move(windows), block_size,
                                           progress.callback(), std::max(max_window, c.seq_len));
  }
  if (eviction) {
    const EvictionRunOptions& o = *eviction;
    const EvictEvalSetup setup{source, max_window, bucket, c.seq_len, args.has("--json")};
    if (args.has("--streaming")) {
      return run_streaming_sweep(*evaluator, o, args.get("--budgets", "256,512"), setup,
                                 args.get("--out", "reports/streaming"));
    }
    if (args.has("--sweep-evict")) {
      return run_evict_sweep(*evaluator, o, args.get("--budgets", "16,32,64,128,256"), setup,
                             args.get("--out", "reports/evict"));
    }
    return run_evict_eval(*evaluator, o, setup);
  }
  if (args.has("--sweep")) {
    return run_sweep(*evaluator, c, block_size, source, args.get("--out", "reports/quant"),
                     args.has("--json"));
  }
  if (args.has("--mla-sweep")) {
    return run_mla_sweep(*evaluator, *loaded.model, block_size, mla_choice, source,
                         args.get("--out", "reports/mla"), args.has("--json"));
  }
  auto variant =
      mla ? make_mla_variant(codec, k, block_size) : make_kv_format_variant(k, v, block_size);
  QualityReport r;
  {
    Progress progress("eval", 1, "positions");
    progress.step(variant->name());
    r = evaluator->evaluate(*variant, progress.callback());
  }
  if (args.has("--json")) {
    nlohmann::json j = report_json(r);
    j["source"] = source;
    j["block_size"] = block_size;
    j["weights"] = cpu::describe_weight_format(*loaded.model);
    if (codec) {
      double e = 0.0;
      for (double x : codec->energy_kept) e += x / static_cast<double>(codec->energy_kept.size());
      j["mla_rank"] = codec->rank();
      j["mla_full_rank"] = codec->full_rank;
      j["mla_energy_kept_mean"] = e;
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("eval: %s, %d windows, %ld scored positions, block %d\n", source.c_str(), r.windows,
              r.positions, block_size);
  std::printf("  variant              %s\n", r.variant.c_str());
  // Native quantized matmuls round their input activations to 8 bits: a cache change as small
  // as fp16's flips some of those roundings, which puts a floor under KL (about 3e-3 nats on
  // SmolLM2 against fp16's own 3e-7 with f32 weights; docs/concepts/mla.md, "A note on native
  // quantized weights").
  if (loaded.model->native() != nullptr) {
    std::printf(
        "  weights              %s: 8-bit activations put a floor under KL; "
        "--weight-format f32 measures the cache alone\n",
        cpu::describe_weight_format(*loaded.model).c_str());
  }
  if (codec) {
    double e = 0.0;
    for (double x : codec->energy_kept) e += x / static_cast<double>(codec->energy_kept.size());
    std::printf(
        "  MLA                  rank %d of %d, %.2f%% of ||[W_k%s; W_v]||^2 kept (mean over "
        "layers)%s\n",
        codec->rank(), codec->full_rank, 100.0 * e,
        codec->options.mode == MlaMode::kAbsorbed ? "_nope" : "",
        codec->options.mode == MlaMode::kAbsorbed ? "; non-RoPE dims lose rotation, no fine-tuning"
                                                  : "");
  }
  std::printf("  perplexity           %.4f (fp32 %.4f, delta %+.4f)\n", r.ppl_variant,
              r.ppl_reference, r.ppl_variant - r.ppl_reference);
  std::printf("  KL(fp32 || variant)  mean %.3e, max %.3e nats\n", r.kl_mean, r.kl_max);
  std::printf("  top-1 agreement      %.2f%%\n", 100.0 * r.top1_agreement);
  std::printf(
      "  bytes per token      %.2f in blocks + %.0f per sequence = %.2f at %.0f tokens (fp32 "
      "%.0f)\n",
      r.footprint.bytes_per_token, r.footprint.bytes_per_sequence, r.effective_bytes_per_token,
      r.mean_window_tokens, r.reference_bytes_per_token);
  return 0;
}

}  // namespace kvscope::cli

// kvscope generate: prints the prompt and the generated text exactly as llama2.c's run does, and a
// one-line summary on stderr.
#include <cstdio>
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"
#include "engine/common/error.h"
#include "engine/mla/mla_codec.h"
#include "engine/model/generate.h"
#include "engine/model/locate.h"

namespace kvscope::cli {

namespace {
constexpr const char* kHelp = R"(usage: kvscope generate [options]

  --model PATH|NAME|synthetic:SPEC   model (default stories260K.bin, searched for)
  --tokenizer PATH                   tokenizer (default tok<vocab>.bin beside the model)
  --prompt TEXT                      prompt (default: none, start from BOS)
  --steps N                          positions to run, prompt included (default 256)
  --temperature T                    0 = greedy (default 0)
  --top-p P                          nucleus sampling threshold (default 0.9)
  --seed S                           sampling seed (default 42)
  --threads N                        CPU threads (default: all cores)
  --block-size B                     KV block size in tokens (default 16)
  --allocator paged|contiguous       KV allocator (default contiguous)
  --kv-dtype F                       KV format (default fp32; with --mla-rank: the latents')
  --mla-rank R                       MLA latent cache of rank R (K/V projections factorized by SVD)
  --mla-mode a|b                     a: rebuild K/V from latents (default); b: absorbed attention
                                     on latents with decoupled RoPE (no fine-tuning: quality drops)
  --mla-rope-dims D                  mode b: rotary dims kept per KV head (even, default 2)
  --mla-rope-select S                mode b: high-freq (default) or norm
)";
}  // namespace

int cmd_generate(const Argv& argv) {
  Args args(argv,
            {"--model", "--tokenizer", "--prompt", "--steps", "--temperature", "--top-p", "--seed",
             "--threads", "--block-size", "--allocator", "--kv-dtype", "--mla-rank", "--mla-mode",
             "--mla-rope-dims", "--mla-rope-select"},
            {"--help"});
  if (args.has("--help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (!args.positional().empty())
    throw Error(args.positional()[0], "unexpected argument; see --help");
  LoadedModel loaded = load_model(args.get("--model"), args.get("--tokenizer"));
  if (!loaded.tokenizer) {
    throw Error(loaded.model->source(), "no tokenizer with " +
                                            std::to_string(loaded.model->config().vocab_size) +
                                            " tokens found; pass --tokenizer PATH");
  }
  GenerateOptions options;
  options.prompt = args.get("--prompt");
  options.steps = args.get_int("--steps", 256);
  options.sampler.temperature = static_cast<float>(args.get_double("--temperature", 0.0));
  options.sampler.top_p = static_cast<float>(args.get_double("--top-p", 0.9));
  options.sampler.seed = static_cast<std::uint64_t>(args.get_i64("--seed", 42));
  if (options.sampler.temperature < 0.0f) {
    fail_expected("--temperature", "a number >= 0", args.get("--temperature"));
  }
  if (options.sampler.top_p < 0.0f || options.sampler.top_p > 1.0f) {
    fail_expected("--top-p", "a number in [0, 1]", args.get("--top-p"));
  }
  options.block_size = args.get_int("--block-size", 16);
  if (options.block_size < 1 || options.block_size > 256 ||
      (options.block_size & (options.block_size - 1)) != 0) {
    fail_expected("--block-size", "a power of two in [1, 256]", std::to_string(options.block_size));
  }
  const std::string alloc = args.get("--allocator", "contiguous");
  if (alloc == "paged")
    options.allocator = AllocatorKind::kPaged;
  else if (alloc != "contiguous")
    fail_expected("--allocator", "paged or contiguous", "'" + alloc + "'");
  options.k_format = options.v_format =
      parse_kv_format(args.get("--kv-dtype", "fp32"), "--kv-dtype");
  const int threads = args.get_int("--threads", 0);
  if (threads < 0) fail_expected("--threads", "a non-negative integer", std::to_string(threads));

  for (const char* f : {"--mla-mode", "--mla-rope-dims", "--mla-rope-select"}) {
    if (args.has(f) && !args.has("--mla-rank")) throw Error(f, "needs --mla-rank R");
  }
  std::unique_ptr<MlaCodec> codec;
  if (args.has("--mla-rank")) {
    MlaOptions o;
    o.mode = parse_mla_mode(args.get("--mla-mode", "a"), "--mla-mode");
    o.rank = args.get_int("--mla-rank", 0);
    o.rope_dims = args.get_int("--mla-rope-dims", o.mode == MlaMode::kAbsorbed ? 2 : 0);
    o.rope_select =
        parse_rope_select(args.get("--mla-rope-select", "high-freq"), "--mla-rope-select");
    codec = std::make_unique<MlaCodec>(make_mla_codec(*loaded.model, o));
    const KvLayout L =
        mla_layout_for(loaded.model->config(), *codec, options.block_size, 1, options.k_format);
    for (KvKind kind : {KvKind::kKey, KvKind::kValue})
      options.k_format.validate(options.block_size, L.row_heads(kind), L.row_head_dim(kind),
                                "--kv-dtype");
    options.mla = codec.get();
  }
  auto backend = make_cpu_backend(threads);
  Transformer transformer(loaded.model, *backend);
  GenerateResult r =
      generate(transformer, *loaded.tokenizer, options, [](const std::string& piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      });
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const double tps = r.seconds > 0 ? (static_cast<double>(r.tokens.size()) - 2) / r.seconds : 0.0;
  std::string cache = options.k_format.name();
  if (codec) cache = codec->name() + " latents " + cache;
  std::fprintf(stderr,
               "%s%d tokens (%d prompt), %.1f tokens/s, KV %ld bytes used of %ld allocated (%s, "
               "%s, block %d)\n",
               loaded.model->is_random_weights() ? "[random weights] " : "",
               static_cast<int>(r.tokens.size()), r.num_prompt_tokens, tps, r.kv_bytes_used,
               r.kv_bytes_allocated, alloc.c_str(), cache.c_str(), options.block_size);
  return 0;
}

}  // namespace kvscope::cli

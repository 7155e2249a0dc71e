// kvscope generate: prints the prompt and the generated text exactly as llama2.c's run does, and a
// one-line summary on stderr.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "cli/args.h"
#include "cli/backend_flag.h"
#include "cli/commands.h"
#include "cli/eviction_flags.h"
#include "cli/format.h"
#include "cli/model_flags.h"
#include "engine/backend/cpu/quant_matmul.h"
#include "engine/common/error.h"
#include "engine/common/setting_source.h"
#include "engine/evict/eviction_hook.h"
#include "engine/infer/generate.h"
#include "engine/mla/mla_codec.h"
#include "engine/model/chat.h"
#include "engine/model/locate.h"

namespace kvscope::cli {

namespace {
constexpr const char* kHelp = R"(usage: kvscope generate [options]

  --model PATH|NAME|synthetic:SPEC   model (default stories260K.bin, searched for)
  --tokenizer PATH                   tokenizer (default tok<vocab>.bin beside the model)
  --prompt TEXT                      prompt (default: none, start from BOS)
  --chat                             chat models (ChatML, e.g. --model smollm2): the prompt is the
                                     user's turn; prints only the answer, stops at the turn's end
  --system TEXT                      --chat: the system turn (default: the model template's line)
  --steps N                          positions to run, prompt included (default 256)
  --temperature T                    0 = greedy (default 0)
  --top-p P                          nucleus sampling threshold (default 0.9)
  --seed S                           sampling seed (default 42)
  --threads N                        CPU threads (default: all cores)
%BACKEND%
  --weights mmap|copy                mmap: the checkpoint's pages, zero copy (default); copy: into
                                     huge-page memory first (model-size RAM, faster decode when the
                                     page cache holds the file in 4 KiB pages; see bench weights)
  --weight-format native|f32         GGUF weights: native = matmuls on the file's quantized blocks
                                     (Q4_0/Q4_1/Q8_0, 8-bit activations; default), f32 =
                                     dequantized at load (the accuracy reference)
  --block-size B                     KV block size in tokens (default 16)
  --allocator paged|contiguous       KV allocator (default contiguous)
  --kv-dtype F                       KV format (default fp32; with --mla-rank: the latents')
  --mla-rank R                       MLA latent cache of rank R (K/V projections factorized by SVD)
  --mla-mode a|b                     a: rebuild K/V from latents (default); b: absorbed attention
                                     on latents with decoupled RoPE (no fine-tuning: quality drops)
  --mla-rope-dims D                  mode b: rotary dims kept per KV head (even, default 2)
  --mla-rope-select S                mode b: high-freq (default) or norm

  --through-bos                      keep going when the model ends a story (BOS), as stories
                                     are concatenated in training (run.c stops there)
  --steps may exceed the model's seq_len: positions past it are outside the trained context
  (dense attention unless --evict); a note says so on stderr, and the summary gives perplexity
  of the model on its own output per 256-position bucket.
token eviction (paged allocator):
  --evict POLICY                     window | sinks | h2o | snapkv | tova | random
  --budget N                         tokens each query attends to, itself included (default 64)
  --sinks S                          sinks: first tokens always kept (default 4)
  --recent R                         h2o: recent window (default budget / 2)
  --obs-window W                     snapkv: last queries that vote (default 8)
  --compact never|half|always        compaction of partially emptied blocks (default never)
  --positions keep|shift             keep original RoPE positions or shift them contiguous
)";
// Perplexity of the model on its own output per bucket of 256 positions, peak KV bytes and what
// eviction did: the measurement behind "generation past the trained context".
void print_position_buckets(const GenerateResult& r, int seq_len, bool random_weights,
                            const EvictingCacheHook* hook) {
  if (r.next_logprob.size() <= static_cast<std::size_t>(seq_len) && hook == nullptr) return;
  const std::string tag = random_weights ? "[random weights] " : "";
  std::fprintf(stderr, "%speak KV %ld bytes", tag.c_str(), r.peak_kv_bytes);
  if (hook != nullptr) {
    const EvictorCounters& k = hook->evictor().counters();
    std::fprintf(stderr,
                 "; %s evicted %ld tokens, freed %ld blocks, moved %ld slots, re-rotated %ld keys",
                 eviction_kind_name(hook->evictor().options().policy.kind).c_str(),
                 k.tokens_evicted, k.blocks_freed, k.slots_moved, k.keys_rotated);
  }
  std::fprintf(
      stderr,
      "\n%sself-perplexity (exp mean -log p of each next token as run) per position bucket:\n",
      tag.c_str());
  constexpr int kBucket = 256;
  for (std::size_t first = 0; first < r.next_logprob.size(); first += kBucket) {
    const std::size_t end = std::min(r.next_logprob.size(), first + kBucket);
    double nll = 0.0;
    for (std::size_t i = first; i < end; ++i) nll -= r.next_logprob[i];
    std::fprintf(stderr, "  positions %5zu-%5zu: %8.3f%s\n", first, end - 1,
                 std::exp(nll / static_cast<double>(end - first)),
                 static_cast<int>(end) > seq_len ? "  (past seq_len)" : "");
  }
}

// The flags that shape one generation, read and checked in the order the errors are reported.
struct GenerateFlags {
  GenerateOptions options;
  std::string alloc;
  int threads = 0;
  bool evicting = false;
};

GenerateFlags read_generate_flags(const Args& args, const LoadedModel& loaded) {
  GenerateFlags f;
  GenerateOptions& options = f.options;
  options.prompt = args.get("--prompt");
  if (args.has("--chat")) {
    const std::string system =
        args.has("--system") ? args.get("--system") : default_system_line(loaded.chat_template);
    options.prompt = render_chatml(*loaded.tokenizer, system, options.prompt);
    options.echo_prompt = false;
  }
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
  f.evicting = args.has("--evict");
  for (const char* flag : kEvictionDetailFlags) {
    if (args.has(flag) && !f.evicting) throw Error(flag, "only applies with --evict");
  }
  f.alloc = args.get("--allocator", f.evicting ? "paged" : "contiguous");
  if (f.evicting && f.alloc != "paged") {
    fail_expected("--allocator", "paged with --evict (eviction frees blocks)", "'" + f.alloc + "'");
  }
  if (f.alloc == "paged")
    options.allocator = AllocatorKind::kPaged;
  else if (f.alloc != "contiguous")
    fail_expected("--allocator", "paged or contiguous", "'" + f.alloc + "'");
  options.k_format = options.v_format =
      parse_kv_format(args.get("--kv-dtype", "fp32"), "--kv-dtype");
  f.threads = args.get_int("--threads", 0);
  if (f.threads < 0)
    fail_expected("--threads", "a non-negative integer", std::to_string(f.threads));
  return f;
}

// --mla-rank: the latent codec the cache stores, checked against --kv-dtype; none without it.
std::unique_ptr<MlaCodec> make_generate_codec(const Args& args, const LoadedModel& loaded,
                                              GenerateOptions& options, bool evicting) {
  if (args.has("--mla-rank") && evicting)
    throw Error("--mla-rank", "MLA is not combined with --evict yet");
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
    codec = std::make_unique<MlaCodec>(
        with_setting_sources({{kMlaRank, "--mla-rank"}, {kMlaRopeDims, "--mla-rope-dims"}},
                             [&] { return make_mla_codec(*loaded.model, o); }));
    const KvLayout L =
        mla_layout_for(loaded.model->config(), *codec, options.block_size, 1, options.k_format);
    for (KvKind kind : {KvKind::kKey, KvKind::kValue})
      options.k_format.validate(options.block_size, L.row_heads(kind), L.row_head_dim(kind),
                                "--kv-dtype");
    options.mla = codec.get();
  }
  return codec;
}

// The one-line summary on stderr, the weights lines, and the per-bucket perplexity.
void print_generate_summary(const GenerateResult& r, const LoadedModel& loaded,
                            const GenerateFlags& f, const MlaCodec* codec,
                            const EvictingCacheHook* hook) {
  const auto rate = [](int positions, double seconds) {
    return seconds > 0 ? positions / seconds : 0.0;
  };
  std::string cache = f.options.k_format.name();
  if (codec) cache = codec->name() + " latents " + cache;
  // Decode last: scripts/vs_llama2c.sh reads the line's last tokens/s (run.c's measure).
  std::fprintf(stderr,
               "%s%d tokens (%d prompt): prefill %d position%s at %.1f tokens/s, decode %.1f "
               "tokens/s, KV %ld bytes used of %ld allocated (%s, %s, block %d)\n",
               loaded.model->is_random_weights() ? "[random weights] " : "",
               static_cast<int>(r.tokens.size()), r.num_prompt_tokens, r.prefill_positions,
               r.prefill_positions == 1 ? "" : "s", rate(r.prefill_positions, r.prefill_seconds),
               rate(r.positions_run - r.prefill_positions, r.decode_seconds), r.kv_bytes_used,
               r.kv_bytes_allocated, f.alloc.c_str(), cache.c_str(), f.options.block_size);
  if (loaded.model->format() == CheckpointFormat::kGguf)
    std::fprintf(stderr, "weights %s\n", cpu::describe_weight_format(*loaded.model).c_str());
  if (loaded.model->storage() == WeightStorage::kCopied)
    std::fprintf(stderr, "weights copied into memory, %s\n",
                 huge_page_text(loaded.model->huge_page_fraction()).c_str());
  print_position_buckets(r, loaded.model->config().seq_len, loaded.model->is_random_weights(),
                         hook);
}

}  // namespace

int cmd_generate(const Argv& argv) {
  Args args(argv, {"--model",         "--tokenizer",       "--prompt",        "--steps",
                   "--temperature",   "--top-p",           "--seed",          "--threads",
                   "--block-size",    "--allocator",       "--kv-dtype",      "--evict",
                   "--budget",        "--sinks",           "--recent",        "--obs-window",
                   "--compact",       "--positions",       "--mla-rank",      "--mla-mode",
                   "--mla-rope-dims", "--mla-rope-select", "--weights",       "--system",
                   "--weight-format", "--backend",         "--device-weights"},
            {"--help", "--through-bos", "--chat"});
  if (args.has("--help")) {
    std::fputs(with_backend_help(kHelp).c_str(), stdout);
    return 0;
  }
  if (!args.positional().empty())
    throw Error(args.positional()[0], "unexpected argument; see --help");
  if (args.has("--system") && !args.has("--chat"))
    throw Error("--system", "only applies with --chat");
  LoadedModel loaded = load_model_flags(
      args, parse_weight_storage(args.get("--weights", "mmap"), "--weights"),
      parse_weight_format(args.get("--weight-format", "native"), "--weight-format"));
  if (!loaded.tokenizer) {
    throw Error(loaded.model->source(), "no tokenizer with " +
                                            std::to_string(loaded.model->config().vocab_size) +
                                            " tokens found; pass --tokenizer PATH");
  }
  GenerateFlags flags = read_generate_flags(args, loaded);
  GenerateOptions& options = flags.options;

  const ModelConfig& c = loaded.model->config();
  options.past_context = options.steps > c.seq_len;
  options.stop_at_bos = !args.has("--through-bos");
  options.score_tokens = options.past_context || args.has("--evict");
  if (options.past_context) {
    std::fprintf(stderr,
                 "note: --steps %d runs past the model's seq_len %d: positions >= %d are "
                 "outside the trained context\n",
                 options.steps, c.seq_len, c.seq_len);
  }
  std::unique_ptr<EvictingCacheHook> hook;
  if (flags.evicting) {
    hook = std::make_unique<EvictingCacheHook>(parse_eviction_flags(args, args.get("--evict")), c,
                                               options.steps);
    options.cache_hook = hook.get();
  }
  with_setting_sources({{kGenerateSteps, "--steps"}, {kGenerateAllocator, "--allocator"}},
                       [&] { validate(options, c); });
  const std::unique_ptr<MlaCodec> codec =
      make_generate_codec(args, loaded, options, flags.evicting);
  RunNeeds needs;
  needs.model = loaded.model.get();
  auto backend = make_backend(args.get("--backend", "auto"), flags.threads,
                              args.get("--device-weights", "f16"), needs);
  Transformer transformer(loaded.model, *backend);
  GenerateResult r = with_setting_sources({{kGeneratePrompt, "--prompt"}}, [&] {
    return generate(transformer, *loaded.tokenizer, options, [](const std::string& piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    });
  });
  std::fputc('\n', stdout);
  std::fflush(stdout);
  print_generate_summary(r, loaded, flags, codec.get(), hook.get());
  return 0;
}

}  // namespace kvscope::cli

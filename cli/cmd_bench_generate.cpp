// kvscope bench generate: decode and prefill tokens/s on a model, with the weight bytes read per
// decoded token against a memory read and the matmul kernel's cache-resident speed, measured in
// the same run.

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli/backend_flag.h"
#include "cli/bench_decode.h"
#include "cli/bench_verbs.h"
#include "cli/format.h"
#include "cli/model_flags.h"
#include "engine/analysis/kv_memory_probe.h"
#include "engine/backend/cpu/quant_matmul.h"
#include "engine/common/error.h"
#include "engine/common/openmp.h"
#include "engine/common/zeroed_buffer.h"
#include "engine/infer/step_runner.h"
#include "engine/kv/kv_format.h"
#include "engine/model/locate.h"

namespace kvscope::cli {
namespace {

// Bytes per second of reading a 256 MiB buffer (far beyond the caches) on `threads` threads,
// each summing its share as 64-bit words: the stream a decode step makes of its weights, as the
// memory roofline. (A copy would move every byte twice, and writes cost a read for ownership.)
double read_bytes_per_second(int threads, int repeat) {
  constexpr std::size_t kBytes = std::size_t{256} << 20;
  constexpr std::size_t kWords = kBytes / 8;
  ZeroedBuffer buf(kBytes);
  std::memset(buf.data(), 1, kBytes);  // touch the pages before timing
  const auto* words = reinterpret_cast<const std::uint64_t*>(buf.data());
  std::uint64_t sink = 0;
  const double secs = median_seconds(repeat, [&] {
    std::uint64_t sum = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : sum)
    for (std::size_t i = 0; i < kWords; ++i) sum += words[i];
    sink += sum;
  });
  if (sink == 42) std::fputs("", stderr);  // keeps the sums observable
  return static_cast<double>(kBytes) / secs;
}

// Multiply-adds per second of the forward pass's matmul on one cache-resident matrix (layer 0's
// query projection, in the form the forward pass reads it: quantized blocks or fp32), `rows` input
// rows per call (1 as in decode, more as in a prefill step): the arithmetic ceiling of the kernel,
// with memory out of the way.
double cached_matmul_macs_per_second(const Model& model, Backend& backend, int repeat, int rows) {
  const ModelConfig& c = model.config();
  MatmulOut o{nullptr, model.forward_weights().wq, c.q_dim()};
  if (model.native() != nullptr) o.q = model.native()->wq[0];
  std::vector<float> x(static_cast<std::size_t>(c.dim) * rows, 0.5f),
      out(static_cast<std::size_t>(c.q_dim()) * rows);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += 0.001f * static_cast<float>(i % 97);
  o.out = out.data();
  const int calls = std::max(20, 2000 / rows);
  const double secs = median_seconds(repeat, [&] {
    for (int i = 0; i < calls; ++i) backend.matmul_batch(x.data(), rows, c.dim, std::span(&o, 1));
  });
  return static_cast<double>(calls) * rows * c.dim * c.q_dim() / secs;
}

// Matmul multiply-adds of a `prompt`-token prefill that wants the last token's logits only.
double prefill_macs(const ModelConfig& c, int prompt) {
  const double classifier = static_cast<double>(c.dim) * c.vocab_size;
  return prompt * (static_cast<double>(matmul_macs_per_token(c)) - classifier) + classifier;
}

// Input rows of the cache-resident kernel measured for prefill: a prefill's rows, up to 64.
int prefill_peak_rows(int prompt) {
  return std::min(prompt, 64);
}

// What bench generate measured, for its report.
struct GenerateFigures {
  const Model& model;
  WeightStorage storage;
  int threads, repeat, prompt;
  Timing decode;
  double prefill_tps, read_bps, peak_macs, prefill_peak_macs;
};

// Decode speed and the roofline figures derived from it.
struct Rates {
  double decode_tps, stream_bps, macs;
  std::int64_t bytes_per_token;
};

Rates rates_of(const GenerateFigures& f) {
  const double decode_tps = f.decode.tokens / f.decode.median_seconds;
  const std::int64_t bytes_per_token = weight_bytes_per_token(f.model);
  return {decode_tps, static_cast<double>(bytes_per_token) * decode_tps,
          static_cast<double>(matmul_macs_per_token(f.model.config())) * decode_tps,
          bytes_per_token};
}

void print_generate_json(const GenerateFigures& f) {
  const Model& model = f.model;
  const Rates r = rates_of(f);
  nlohmann::json j = {{"model", model.source()},
                      {"random_weights", model.is_random_weights()},
                      {"weights", cpu::describe_weight_format(model)},
                      {"weight_format", weight_format_name(model.weight_format())},
                      {"threads", f.threads},
                      {"decode_tokens", f.decode.tokens},
                      {"decode_tokens_per_s", r.decode_tps},
                      {"decode_best_tokens_per_s", f.decode.tokens / f.decode.best_seconds},
                      {"prefill_tokens", f.prompt},
                      {"prefill_tokens_per_s", f.prefill_tps},
                      {"weight_bytes_per_token", r.bytes_per_token},
                      {"weight_stream_bytes_per_s", r.stream_bps},
                      {"memory_read_bytes_per_s", f.read_bps},
                      {"matmul_macs_per_s", r.macs},
                      {"cached_matmul_macs_per_s", f.peak_macs},
                      {"prefill_matmul_macs_per_s",
                       prefill_macs(model.config(), f.prompt) * f.prefill_tps / f.prompt},
                      {"cached_matmul_rows", prefill_peak_rows(f.prompt)},
                      {"cached_matmul_rows_macs_per_s", f.prefill_peak_macs},
                      {"runs", f.repeat}};
  std::printf("%s\n", j.dump().c_str());
}

void print_generate_text(const GenerateFigures& f) {
  const Model& model = f.model;
  const Rates r = rates_of(f);
  std::printf("%s%s (%d threads; weights %s, %s)\n",
              model.is_random_weights() ? "[random weights] " : "", model.source().c_str(),
              f.threads, model.is_random_weights() ? "owned" : weight_storage_name(f.storage),
              cpu::describe_weight_format(model).c_str());
  std::printf("  decode    %d tokens from BOS: median %.1f tokens/s, best %.1f (%d runs)\n",
              f.decode.tokens, r.decode_tps, f.decode.tokens / f.decode.best_seconds, f.repeat);
  std::printf("  prefill   %d tokens in one step: median %.1f tokens/s\n", f.prompt, f.prefill_tps);
  std::printf(
      "  weights   %s read per decoded token: %.1f GB/s at the median decode speed, %.0f%% "
      "of a 256 MiB memory read in this run (%.1f GB/s)\n",
      human_bytes(static_cast<double>(r.bytes_per_token)).c_str(), r.stream_bps / 1e9,
      100.0 * r.stream_bps / f.read_bps, f.read_bps / 1e9);
  std::printf(
      "  compute   %.1f G multiply-adds/s in the matmuls, %.0f%% of the same kernel on a "
      "cache-resident matrix (%.1f G/s)\n",
      r.macs / 1e9, 100.0 * r.macs / f.peak_macs, f.peak_macs / 1e9);
  const double prefill = prefill_macs(model.config(), f.prompt) * f.prefill_tps / f.prompt;
  std::printf(
      "  prefill compute %.1f G multiply-adds/s in the matmuls, %.0f%% of the same kernel on a "
      "cache-resident matrix at %d input rows (%.1f G/s)\n",
      prefill / 1e9, 100.0 * prefill / f.prefill_peak_macs, prefill_peak_rows(f.prompt),
      f.prefill_peak_macs / 1e9);
}

int bench_generate(const Args& args) {
  const WeightStorage storage = parse_weight_storage(args.get("--weights", "mmap"), "--weights");
  const WeightFormat format =
      parse_weight_format(args.get("--weight-format", "native"), "--weight-format");
  LoadedModel loaded = load_model_flags(args, storage, format);
  const Model& model = *loaded.model;
  const ModelConfig& c = model.config();
  int threads = args.get_int("--threads", 0);
  if (threads < 0) fail_expected("--threads", "a non-negative integer", std::to_string(threads));
  if (threads == 0) threads = omp_get_num_procs();
  const int repeat = checked_repeat(args, 5);
  const int steps = checked_steps(args, c, 256);
  const int prompt = args.get_int("--prompt-tokens", std::min(128, c.seq_len));
  if (prompt < 1 || prompt > c.seq_len) {
    fail_expected("--prompt-tokens", "an integer in [1, " + std::to_string(c.seq_len) + "]",
                  std::to_string(prompt));
  }
  const bool json = args.has("--json");
  GenerateOptions o = options_from(args);
  RunNeeds needs;
  needs.model = loaded.model.get();
  auto backend = make_backend(args.get("--backend", "auto"), threads,
                              args.get("--device-weights", "f16"), needs);
  Transformer t(loaded.model, *backend);
  if (!json) {
    std::fprintf(stderr,
                 "bench generate: %s, %d threads: decode %d x %d tokens, prefill %d x %d "
                 "tokens, memory read, cached matmul...\n",
                 model.source().c_str(), threads, repeat, steps - 1, repeat, prompt);
  }
  time_generation(t, std::min(steps, 16), 1, o);  // warm-up
  const Timing decode = time_generation(t, steps, repeat, o);
  // Prefill: `prompt` tokens (a fixed pseudo-random text) in one forward_step, into a fresh cache,
  // with the logits of the last token only, as a served prompt's prefill (and llama-bench's pp
  // test) computes them: a perplexity run, which wants every position's, pays the classifier
  // `prompt` times (a fifth more work on SmolLM2).
  int repeats = 0;
  const std::vector<int> tokens =
      probe_tokens(nullptr, "", prompt, c.vocab_size, "bench", &repeats);
  const KvFormat fp32 = parse_kv_format("fp32", "bench");
  const double prefill_secs = median_seconds(repeat, [&] {
    SoloSequence seq(kv_layout_for(c, 16, 1, fp32, fp32), prompt);
    seq.cache().require_append_slots(SoloSequence::kSeq, prompt);
    std::vector<StepToken> step;
    add_chunk(step, seq.cache().view(SoloSequence::kSeq), 0, tokens, 0, /*want_logits=*/false);
    step.back().want_logits = true;
    t.forward_step(step);
  });
  const double read_bps = read_bytes_per_second(threads, repeat);
  const double peak_macs = cached_matmul_macs_per_second(model, *backend, repeat, 1);
  const double prefill_peak =
      cached_matmul_macs_per_second(model, *backend, repeat, prefill_peak_rows(prompt));
  GenerateFigures f{model,    storage,   threads,     repeat, prompt, decode, prompt / prefill_secs,
                    read_bps, peak_macs, prefill_peak};
  if (json)
    print_generate_json(f);
  else
    print_generate_text(f);
  return 0;
}

}  // namespace

const Subverb& bench_generate_verb() {
  static const Subverb verb{
      "generate",
      "decode and prefill tokens/s, weight bytes per token against a memory read",
      {"--model", "--tokenizer", "--steps", "--threads", "--repeat", "--allocator", "--block-size",
       "--weights", "--weight-format", "--prompt-tokens", "--backend", "--device-weights"},
      {"--json"},
      with_backend_help(R"(usage: kvscope bench generate [options]

Decode and prefill tokens/s on a model, the weight bytes read per decoded token against a 256 MiB
memory read, and the matmuls' multiply-adds/s against the same kernel on a cache-resident matrix,
all measured in the same run.

  --model PATH|NAME          model (default stories260K.bin)
  --tokenizer PATH           tokenizer (default: found beside the model)
  --steps N                  decode positions from BOS (default 256, at most the model's seq_len)
  --prompt-tokens P          prefill: P tokens in one step, logits of the last one only
                             (default 128)
  --threads T                CPU threads (default: all cores)
  --repeat R                 runs of each measurement; medians (default 5)
  --allocator paged|contiguous  the KV cache (default contiguous)
  --block-size B             KV block size in tokens (default 16)
  --weights mmap|copy        the checkpoint mapped (default) or copied into memory
  --weight-format native|f32 GGUF weights: native = matmuls on the quantized blocks (default),
                             f32 = dequantized at load
%BACKEND%
  --json                     print the figures as one JSON object
)"),
      bench_generate};
  return verb;
}

}  // namespace kvscope::cli

// kvscope bench: measured performance, reported as absolute figures and as ratios against a
// baseline measured in the same run (never as timed assertions in tests).
//   generate  decode tokens/s on a model (greedy, from BOS)
//   weights   decode with mmapped vs copied (huge-page) weights, interleaved runs
//   kv        paged vs contiguous decode cost on the same model, interleaved runs
//   alloc     block allocate + free cost of the paged pool
//   quant     decode attention cost per KV format (cmd_bench_quant.cpp)
//   mla       latent (MLA) attention vs MHA attention at DeepSeek-V3 shape (cmd_bench_mla.cpp)
//   tiers     prefill vs reload from the host and disk KV tiers, per prefix length
//             (cmd_bench_tiers.cpp)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "cli/args.h"
#include "cli/backend_flag.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "cli/model_flags.h"
#include "engine/analysis/kv_memory_probe.h"
#include "engine/backend/cpu/quant_matmul.h"
#include "engine/common/error.h"
#include "engine/common/zeroed_buffer.h"
#include "engine/infer/generate.h"
#include "engine/infer/step_runner.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/kv_format.h"
#include "engine/kv/kv_storage.h"
#include "engine/model/locate.h"

#include <nlohmann/json.hpp>

namespace kvscope::cli {

int bench_quant(const Args& args);      // cmd_bench_quant.cpp
int bench_mla(const Args& args);        // cmd_bench_mla.cpp
int bench_batch(const Args& args);      // cmd_bench_batch.cpp
int bench_attention(const Args& args);  // cmd_bench_attention.cpp
int bench_evict(const Args& args);      // cmd_bench_evict.cpp
int bench_tiers(const Args& args);      // cmd_bench_tiers.cpp

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kHelp =
    R"(usage: kvscope bench <generate|weights|kv|alloc|quant|mla|batch|attention|evict|tiers> [options]

  generate   decode and prefill tokens/s, weight bytes per token against a memory read and the
             kernel's cache-resident speed, same run: --model M --steps N (default 256)
             --prompt-tokens P (prefill, default 128) --threads T --repeat R (default 5)
             --allocator paged|contiguous --block-size B --weights mmap|copy (default mmap)
             --weight-format native|f32 (default native) --backend auto|cpu|cuda|cuda-sim
             --device-weights f32|f16|bf16 (the CUDA backends' GEMM weights, default f16) --json
  weights    decode with the checkpoint mmapped (zero copy) vs copied into huge-page memory,
             interleaved, same model, steps and threads; prints the copy/mmap speed ratio
  kv         paged (block 16 unless --block-size) vs contiguous decode, interleaved, same model
             and steps; prints the paged/contiguous time ratio
  alloc      BlockPool allocate + free: --blocks N (default 100000) --ops M (default 10000000)
  quant      decode attention cost per KV format vs fp32, same run: --model M --tokens N
             (default 512) --block-size B --threads T (default 1) --repeat R
  mla        absorbed latent attention vs MHA attention, one layer, same run: --model M (default
             synthetic:deepseek-v3-mla-dims, random weights) --tokens N (default 1024)
             --kv-dtype F (default fp32) --block-size B --threads T (default 1) --repeat R
  batch      decode tokens/s with N sequences per step, each step one batched forward:
             --model M (default synthetic:smollm2-135m, random weights) --seqs 1,4,16
             --steps N (default 32) --repeat R (default 3) --threads T --block-size B --json
             --weight-format native|f32 (GGUF models; default native) --backend
             auto|cpu|cuda|cuda-sim --device-weights f32|f16|bf16; on a CUDA backend each size
             runs the whole step on the device and the same ops one by one, with the copies
             between host and device per step (cuda-sim: the emulator's times)
  attention  CUDA decode attention at Llama-3-8B's shape (32 query heads, 8 KV heads of 128):
             K/V bytes read per second beside a device copy in the same run, paged vs
             contiguous, per format: --backend cuda|cuda-sim (default cuda: needs a GPU;
             cuda-sim: the emulated device, times meaningless) --batch 1,8,64
             --contexts 1024,8192,32768 --formats fp16,int8,fp8-e4m3 --block-size B --repeat R
             --json --sdpa auto|off (auto: PyTorch's SDPA at fp16 beside them when torch sees
             the GPU, scripts/sdpa_bench.py)
  evict      an eviction sweep scored on the real model (window, h2o, h2o compacted at each
             budget, as the UI's quality panel runs it), one run at a time vs all in lockstep
             (one engine step per position for every run), interleaved, same figures:
             --model M --tokens N (default 512) --budgets LIST (default 16,32,64,128)
             --threads T (default 1) --repeat R (default 3) --json
  tiers      when is reloading a cached prefix cheaper than recomputing it: per prefix length,
             its prefill in one step on the real model against reloading its blocks from a host
             tier (RAM) and a disk tier (a file in --dir, default the temp directory; synced and
             dropped from the page cache, so reads come from the device), and the break-even
             length: --model M --tokens 16,32,... (default doubling from the block size to 1,024)
             --kv-dtype F (default fp16) --block-size B (default 16) --threads T (default 1)
             --repeat R (default 5) --dir D --json
)";

struct Timing {
  double best_seconds = 0.0;
  double median_seconds = 0.0;
  int tokens = 0;
};

// Times `repeat` greedy generations of `steps` positions from BOS (prefill-free: pure decode).
Timing time_generation(Transformer& t, int steps, int repeat, const GenerateOptions& o) {
  std::vector<double> secs;
  int tokens = 0;
  for (int r = 0; r < repeat; ++r) {
    auto start = Clock::now();
    tokens = static_cast<int>(generate_tokens(t, {}, steps, o, nullptr).size()) - 1;
    secs.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(secs.begin(), secs.end());
  return {secs.front(), secs[secs.size() / 2], tokens};
}

// Seconds of `repeat` runs of a and of b, interleaved (a, b, a, b, ...) so that load changes on the
// machine hit both alike; each list sorted, so front() is the least disturbed run.
struct Interleaved {
  std::vector<double> a, b;
  double min_a() const { return a.front(); }
  double min_b() const { return b.front(); }
  double median_a() const { return a[a.size() / 2]; }
  double median_b() const { return b[b.size() / 2]; }
};

template <typename RunA, typename RunB>
Interleaved time_interleaved(int repeat, RunA&& run_a, RunB&& run_b) {
  Interleaved t;
  for (int r = 0; r < repeat; ++r) {
    t.a.push_back(run_a());
    t.b.push_back(run_b());
  }
  std::sort(t.a.begin(), t.a.end());
  std::sort(t.b.begin(), t.b.end());
  return t;
}

GenerateOptions options_from(const Args& args) {
  GenerateOptions o;
  o.block_size = args.get_int("--block-size", 16);
  const std::string alloc = args.get("--allocator", "contiguous");
  if (alloc == "paged")
    o.allocator = AllocatorKind::kPaged;
  else if (alloc != "contiguous")
    fail_expected("--allocator", "paged or contiguous", "'" + alloc + "'");
  return o;
}

// --steps as given (an error outside [2, seq_len]), else `fallback` capped at the model's seq_len.
int checked_steps(const Args& args, const ModelConfig& c, int fallback) {
  const int steps = args.get_int("--steps", std::min(fallback, c.seq_len));
  if (steps < 2 || steps > c.seq_len) {
    fail_expected("--steps",
                  "an integer in [2, " + std::to_string(c.seq_len) + "] (the model's seq_len)",
                  std::to_string(steps));
  }
  return steps;
}

int checked_repeat(const Args& args, int fallback) {
  const int repeat = args.get_int("--repeat", fallback);
  if (repeat < 1) fail_expected("--repeat", "a positive integer", std::to_string(repeat));
  return repeat;
}

// Median seconds of `repeat` runs of fn (after one warm-up run).
template <typename Fn>
double median_seconds(int repeat, Fn&& fn) {
  fn();
  std::vector<double> secs;
  for (int r = 0; r < repeat; ++r) {
    const auto start = Clock::now();
    fn();
    secs.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(secs.begin(), secs.end());
  return secs[secs.size() / 2];
}

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
// query projection, in the form the forward pass reads it: quantized blocks or fp32), one input
// row per call as in decode: the arithmetic ceiling of the kernel, with memory out of the way.
double cached_matmul_macs_per_second(const Model& model, Backend& backend, int repeat) {
  const ModelConfig& c = model.config();
  MatmulOut o{nullptr, model.weights().wq, c.q_dim()};
  if (model.native() != nullptr) o.q = model.native()->wq[0];
  std::vector<float> x(static_cast<std::size_t>(c.dim), 0.5f),
      out(static_cast<std::size_t>(c.q_dim()));
  o.out = out.data();
  constexpr int kCalls = 2000;
  const double secs = median_seconds(repeat, [&] {
    for (int i = 0; i < kCalls; ++i) backend.matmul_batch(x.data(), 1, c.dim, std::span(&o, 1));
  });
  return static_cast<double>(kCalls) * c.dim * c.q_dim() / secs;
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
  // Prefill: `prompt` tokens (a fixed pseudo-random text) in one forward_step, into a fresh cache.
  int repeats = 0;
  const std::vector<int> tokens =
      probe_tokens(nullptr, "", prompt, c.vocab_size, "bench", &repeats);
  const KvFormat fp32 = parse_kv_format("fp32", "bench");
  const double prefill_secs = median_seconds(repeat, [&] {
    SoloSequence seq(kv_layout_for(c, 16, 1, fp32, fp32), prompt);
    seq.run(
        t, tokens, [](int, std::span<const float>) {}, prompt);
  });
  const double read_bps = read_bytes_per_second(threads, repeat);
  const double peak_macs = cached_matmul_macs_per_second(model, *backend, repeat);

  const double decode_tps = decode.tokens / decode.median_seconds;
  const double prefill_tps = prompt / prefill_secs;
  const std::int64_t bytes_per_token = weight_bytes_per_token(model);
  const double stream_bps = static_cast<double>(bytes_per_token) * decode_tps;
  const double macs = static_cast<double>(matmul_macs_per_token(c)) * decode_tps;
  if (json) {
    nlohmann::json j = {{"model", model.source()},
                        {"random_weights", model.is_random_weights()},
                        {"weights", cpu::describe_weight_format(model)},
                        {"weight_format", weight_format_name(model.weight_format())},
                        {"threads", threads},
                        {"decode_tokens", decode.tokens},
                        {"decode_tokens_per_s", decode_tps},
                        {"decode_best_tokens_per_s", decode.tokens / decode.best_seconds},
                        {"prefill_tokens", prompt},
                        {"prefill_tokens_per_s", prefill_tps},
                        {"weight_bytes_per_token", bytes_per_token},
                        {"weight_stream_bytes_per_s", stream_bps},
                        {"memory_read_bytes_per_s", read_bps},
                        {"matmul_macs_per_s", macs},
                        {"cached_matmul_macs_per_s", peak_macs},
                        {"runs", repeat}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%s%s (%d threads; weights %s, %s)\n",
              model.is_random_weights() ? "[random weights] " : "", model.source().c_str(), threads,
              model.is_random_weights() ? "owned" : weight_storage_name(storage),
              cpu::describe_weight_format(model).c_str());
  std::printf("  decode    %d tokens from BOS: median %.1f tokens/s, best %.1f (%d runs)\n",
              decode.tokens, decode_tps, decode.tokens / decode.best_seconds, repeat);
  std::printf("  prefill   %d tokens in one step: median %.1f tokens/s\n", prompt, prefill_tps);
  std::printf(
      "  weights   %s read per decoded token: %.1f GB/s at the median decode speed, %.0f%% "
      "of a 256 MiB memory read in this run (%.1f GB/s)\n",
      human_bytes(static_cast<double>(bytes_per_token)).c_str(), stream_bps / 1e9,
      100.0 * stream_bps / read_bps, read_bps / 1e9);
  std::printf(
      "  compute   %.1f G multiply-adds/s in the matmuls, %.0f%% of the same kernel on a "
      "cache-resident matrix (%.1f G/s)\n",
      macs / 1e9, 100.0 * macs / peak_macs, peak_macs / 1e9);
  return 0;
}

int bench_weights(const Args& args) {
  LoadedModel mapped = load_model_flags(args, WeightStorage::kMapped);
  if (mapped.model->is_random_weights()) {
    throw Error("--model",
                "expected a checkpoint file (synthetic weights are always in memory; "
                "write one with `kvscope synth`), got " +
                    args.get("--model"));
  }
  const auto load_start = Clock::now();
  const std::shared_ptr<const Model> copied =
      Model::load(mapped.model->source(), WeightStorage::kCopied);
  const double copy_seconds = std::chrono::duration<double>(Clock::now() - load_start).count();
  const int threads = args.get_int("--threads", 0);
  const int repeat = checked_repeat(args, 5);
  const int steps = checked_steps(args, mapped.model->config(), 256);
  auto backend = make_cpu_backend(threads);
  Transformer tm_map(mapped.model, *backend), tm_copy(copied, *backend);
  GenerateOptions o = options_from(args);
  time_generation(tm_map, std::min(steps, 16), 1, o);  // warm-up: page faults, page cache
  time_generation(tm_copy, std::min(steps, 16), 1, o);
  int tokens = 0;
  const Interleaved t = time_interleaved(
      repeat,
      [&] {
        const Timing m = time_generation(tm_map, steps, 1, o);
        tokens = m.tokens;
        return m.best_seconds;
      },
      [&] { return time_generation(tm_copy, steps, 1, o).best_seconds; });
  std::printf("%s: %d tokens, %d threads, %d interleaved runs each (load with copy: %.2f s)\n",
              mapped.model->source().c_str(), tokens, threads, repeat, copy_seconds);
  std::printf("  mmap (zero copy)    median %.1f tokens/s, best %.1f\n", tokens / t.median_a(),
              tokens / t.min_a());
  std::printf("  copy (huge pages)   median %.1f tokens/s, best %.1f; %s\n", tokens / t.median_b(),
              tokens / t.min_b(), huge_page_text(copied->huge_page_fraction()).c_str());
  std::printf("  copy / mmap speed   %.3f (median), %.3f (best)\n", t.median_a() / t.median_b(),
              t.min_a() / t.min_b());
  return 0;
}

int bench_kv(const Args& args) {
  LoadedModel loaded = load_model_flags(args);
  const int repeat = checked_repeat(args, 15);
  const int steps = checked_steps(args, loaded.model->config(), 512);
  auto backend = make_cpu_backend(args.get_int("--threads", 0));
  Transformer t(loaded.model, *backend);
  GenerateOptions contiguous = options_from(args);
  contiguous.allocator = AllocatorKind::kContiguous;
  GenerateOptions paged = contiguous;
  paged.allocator = AllocatorKind::kPaged;
  time_generation(t, std::min(steps, 16), 1, paged);  // warm-up
  // The minimum is the least disturbed run (robust on a shared machine); the median is shown too.
  const Interleaved runs = time_interleaved(
      repeat, [&] { return time_generation(t, steps, 1, contiguous).best_seconds; },
      [&] { return time_generation(t, steps, 1, paged).best_seconds; });
  const double c_min = runs.min_a(), p_min = runs.min_b();
  const double c_med = runs.median_a(), p_med = runs.median_b();
  std::printf(
      "%s%s, %d positions, block %d, %d interleaved runs each:\n"
      "  contiguous  min %.2f ms  median %.2f ms\n"
      "  paged       min %.2f ms  median %.2f ms\n"
      "  paged/contiguous = %.3f (min), %.3f (median)\n",
      loaded.model->is_random_weights() ? "[random weights] " : "", loaded.model->source().c_str(),
      steps, paged.block_size, repeat, c_min * 1e3, c_med * 1e3, p_min * 1e3, p_med * 1e3,
      p_min / c_min, p_med / c_med);
  return 0;
}

int bench_alloc(const Args& args) {
  const int blocks = args.get_int("--blocks", 100000);
  const long long ops = args.get_i64("--ops", 10000000);
  if (blocks < 1) fail_expected("--blocks", "a positive integer", std::to_string(blocks));
  BlockPool pool(blocks);
  // Steady state at half occupancy: allocate one, free the oldest held.
  std::vector<BlockId> held;
  held.reserve(static_cast<std::size_t>(blocks));
  for (int i = 0; i < blocks / 2; ++i) held.push_back(*pool.allocate());
  std::size_t oldest = 0;
  auto start = Clock::now();
  for (long long i = 0; i < ops; ++i) {
    BlockId b = *pool.allocate();
    pool.release(held[oldest]);
    held[oldest] = b;
    oldest = oldest + 1 == held.size() ? 0 : oldest + 1;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  pool.check_invariants();
  std::printf(
      "BlockPool(%d blocks): %lld allocate+free pairs in %.3f s = %.1f ns per pair, %.1f M "
      "pairs/s\n",
      blocks, ops, secs, secs * 1e9 / static_cast<double>(ops),
      static_cast<double>(ops) / secs / 1e6);
  return 0;
}

}  // namespace

int cmd_bench(const Argv& argv) {
  Args args(argv,
            {"--model",     "--tokenizer",      "--steps",  "--threads",       "--repeat",
             "--allocator", "--block-size",     "--blocks", "--ops",           "--tokens",
             "--kv-dtype",  "--weights",        "--seqs",   "--weight-format", "--prompt-tokens",
             "--backend",   "--device-weights", "--batch",  "--contexts",      "--formats",
             "--budgets",   "--sdpa",           "--dir"},
            {"--help", "--json"});
  if (args.has("--help") || args.positional().empty()) {
    std::fputs(kHelp, args.has("--help") ? stdout : stderr);
    return args.has("--help") ? 0 : 2;
  }
  const std::string what = args.positional()[0];
  // The flags each benchmark reads: any other is refused rather than silently ignored.
  static const std::map<std::string, std::set<std::string>> kFlags = {
      {"generate",
       {"--model", "--tokenizer", "--steps", "--threads", "--repeat", "--allocator", "--block-size",
        "--weights", "--weight-format", "--prompt-tokens", "--json", "--backend",
        "--device-weights"}},
      {"weights",
       {"--model", "--tokenizer", "--steps", "--threads", "--repeat", "--allocator",
        "--block-size"}},
      {"kv",
       {"--model", "--tokenizer", "--steps", "--threads", "--repeat", "--allocator",
        "--block-size"}},
      {"alloc", {"--blocks", "--ops"}},
      {"quant", {"--model", "--tokens", "--block-size", "--threads", "--repeat"}},
      {"mla", {"--model", "--tokens", "--kv-dtype", "--block-size", "--threads", "--repeat"}},
      {"batch",
       {"--model", "--seqs", "--steps", "--repeat", "--threads", "--block-size", "--json",
        "--weight-format", "--backend", "--device-weights"}},
      {"attention",
       {"--backend", "--batch", "--contexts", "--formats", "--block-size", "--repeat", "--json",
        "--sdpa"}},
      {"evict",
       {"--model", "--tokenizer", "--tokens", "--budgets", "--threads", "--repeat", "--json"}},
      {"tiers",
       {"--model", "--tokenizer", "--tokens", "--kv-dtype", "--block-size", "--threads", "--repeat",
        "--dir", "--json"}},
  };
  if (const auto it = kFlags.find(what); it != kFlags.end()) {
    for (const std::string& flag : args.given()) {
      if (flag != "--help" && it->second.count(flag) == 0) {
        std::string takes;
        for (const std::string& f : it->second) takes.append(takes.empty() ? "" : ", ").append(f);
        throw Error(flag,
                    "does not apply to `kvscope bench " + what + "` (it takes " + takes + ")");
      }
    }
  }
  if (what == "generate") return bench_generate(args);
  if (what == "weights") return bench_weights(args);
  if (what == "kv") return bench_kv(args);
  if (what == "alloc") return bench_alloc(args);
  if (what == "quant") return bench_quant(args);
  if (what == "mla") return bench_mla(args);
  if (what == "batch") return bench_batch(args);
  if (what == "attention") return bench_attention(args);
  if (what == "evict") return bench_evict(args);
  if (what == "tiers") return bench_tiers(args);
  fail_expected("bench",
                "generate, weights, kv, alloc, quant, mla, batch, attention, evict or tiers",
                "'" + what + "'");
}

}  // namespace kvscope::cli

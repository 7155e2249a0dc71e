// kvscope bench quant: decode attention cost per KV format relative to fp32, measured in the same
// run (interleaved repeats, medians). It times the CPU paged_attention op alone on a cache of the
// model's per-layer shape filled with random K/V, so the figure is the dequantize-on-read cost.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "cli/args.h"
#include "cli/bench_cache.h"
#include "cli/bench_verbs.h"
#include "cli/progress.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/common/error.h"
#include "engine/model/locate.h"

namespace kvscope::cli {
namespace {

using Clock = std::chrono::steady_clock;

OneLayerCache make_cache(const ModelConfig& c, const KvFormat& f, int block_size, int tokens) {
  std::mt19937 rng(2);
  return random_one_layer_cache(kv_layout_for(c, block_size, 1, f, f), tokens, rng);
}

}  // namespace

int bench_quant(const Args& args) {
  std::string source;
  const ModelConfig c = model_config_for(args.get("--model"), &source);
  const int tokens = args.get_int("--tokens", 512);
  const int repeat = std::max(1, args.get_int("--repeat", 7));
  const int block_size = args.get_int("--block-size", 16);
  if (tokens < 1 || tokens > 1'000'000)
    fail_expected("--tokens", "an integer in [1, 1000000]", std::to_string(tokens));
  if (block_size < 1 || block_size > 256 || (block_size & (block_size - 1)) != 0) {
    fail_expected("--block-size", "a power of two in [1, 256]", std::to_string(block_size));
  }
  const int threads = args.get_int("--threads", 1);
  auto backend = make_cpu_backend(threads);  // sets the OpenMP thread count
  std::vector<KvFormat> formats;
  std::vector<OneLayerCache> caches;
  for (const auto& name : kv_format_names()) {
    formats.push_back(parse_kv_format(name, "bench"));
    caches.push_back(make_cache(c, formats.back(), block_size, tokens));
  }
  const AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim()};
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(static_cast<std::size_t>(c.q_dim())), out(q.size()), scratch;  // [q_dim]
  for (float& x : q) x = normal(rng);
  // Calls per timing sample: about 20 ms of fp32 work.
  auto time_calls = [&](const OneLayerCache& cache, int calls) {
    const KvSeqView view = cache.view();
    auto start = Clock::now();
    for (int i = 0; i < calls; ++i)
      cpu::paged_attention(view, 0, shape, q.data(), out.data(), tokens - 1, nullptr, scratch);
    return std::chrono::duration<double>(Clock::now() - start).count() / calls;
  };
  int calls = 1;
  while (time_calls(caches[0], calls) * calls < 0.02 && calls < (1 << 24)) calls *= 2;
  std::vector<std::vector<double>> secs(formats.size());
  {
    Progress progress("bench quant", repeat, "formats");
    for (int r = 0; r < repeat; ++r) {
      progress.step("repeat " + std::to_string(r + 1));
      for (std::size_t f = 0; f < formats.size(); ++f) {
        secs[f].push_back(time_calls(caches[f], calls));
        progress.update(static_cast<long>(f) + 1, static_cast<long>(formats.size()));
      }
    }
  }
  for (auto& s : secs) std::sort(s.begin(), s.end());
  const double fp32 = secs[0][secs[0].size() / 2];
  std::printf(
      "%s: decode attention over %d cached tokens, one layer (%d query heads, %d KV heads x %d), "
      "block %d, %d thread(s); median of %d x %d calls\n",
      source.c_str(), tokens, c.n_heads, c.n_kv_heads, c.head_dim(), block_size, threads, repeat,
      calls);
  std::printf("  %-10s %12s %14s %12s %12s\n", "format", "us/call", "vs fp32 time", "bytes/token",
              "vs fp32 size");
  for (std::size_t f = 0; f < formats.size(); ++f) {
    const double t = secs[f][secs[f].size() / 2];
    const KvLayout& L = caches[f].storage->layout();
    std::printf("  %-10s %12.2f %13.2fx %12.1f %11.3fx\n", formats[f].name().c_str(), t * 1e6,
                t / fp32, L.bytes_per_token(),
                L.bytes_per_token() / caches[0].storage->layout().bytes_per_token());
  }
  return 0;
}

const Subverb& bench_quant_verb() {
  static const Subverb verb{"quant",
                            "decode attention cost per KV format vs fp32, same run",
                            {"--model", "--tokens", "--block-size", "--threads", "--repeat"},
                            {},
                            R"(usage: kvscope bench quant [options]

Decode attention cost per KV format against fp32, measured in the same run (interleaved repeats,
medians): the CPU paged_attention op alone on a cache of the model's per-layer shape filled with
random K/V, so the figure is the dequantize-on-read cost.

  --model PATH|NAME          the shape (default stories260K.bin)
  --tokens N                 context length in tokens (default 512)
  --block-size B             KV block size in tokens (default 16)
  --threads T                CPU threads (default 1)
  --repeat R                 interleaved repeats (default 7)
)",
                            bench_quant};
  return verb;
}

}  // namespace kvscope::cli

// kvscope bench mla: decode attention over a latent (MLA) cache vs over the MHA cache of the same
// model shape, one layer, measured in the same run (interleaved repeats, medians). The default
// shape is DeepSeek-V3's (128 heads, latent 512, RoPE key 64) with random weights and cache: the
// figure is the kernel cost, not a quality.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "cli/args.h"
#include "cli/bench_cache.h"
#include "cli/bench_verbs.h"
#include "cli/format.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/mla_ops.h"
#include "engine/common/error.h"
#include "engine/model/locate.h"

namespace kvscope::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<float> random_vector(std::size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> out(n);
  for (float& x : out) x = normal(rng);
  return out;
}

// The calls per timing (doubled until `calls` of `a` take 20 ms), then `repeat` timings of a and
// of b, interleaved so drift hits both: their median seconds per call.
template <typename A, typename B>
std::pair<double, double> interleaved_medians(const A& a, const B& b, int repeat, int& calls) {
  auto time_calls = [](const auto& call, int n) {
    auto start = Clock::now();
    for (int i = 0; i < n; ++i) call();
    return std::chrono::duration<double>(Clock::now() - start).count() / n;
  };
  while (time_calls(a, calls) * calls < 0.02 && calls < (1 << 20)) calls *= 2;
  std::vector<double> t_a, t_b;
  for (int r = 0; r < repeat; ++r) {
    t_a.push_back(time_calls(a, calls));
    t_b.push_back(time_calls(b, calls));
  }
  std::sort(t_a.begin(), t_a.end());
  std::sort(t_b.begin(), t_b.end());
  return {t_a[t_a.size() / 2], t_b[t_b.size() / 2]};
}

// One latent attention head group: H heads over rank-R latents with a D-dim RoPE key.
cpu::LatentAttentionShape latent_shape(int H, int hd, int R, int D) {
  cpu::LatentAttentionShape ls;
  ls.n_heads = H;
  ls.rank = R;
  ls.rope_heads = 1;
  ls.rope_dim = D;
  ls.score_divisor = std::sqrt(static_cast<float>(hd + D));
  return ls;
}

// What bench mla measured, for its table.
struct MlaBenchFigures {
  std::string source, format;
  int tokens, block_size, threads, repeat, calls;
  int H, hd, R, D;      // query heads, head dim, latent rank, RoPE key dims
  double m_mha, m_mla;  // median seconds per call
  double b_mha, b_mla;  // cache bytes per token
};

void print_mla_bench(const MlaBenchFigures& f) {
  const int tokens = f.tokens, H = f.H, hd = f.hd, R = f.R, D = f.D;
  const double m_mha = f.m_mha, m_mla = f.m_mla, b_mha = f.b_mha, b_mla = f.b_mla;
  const double macs_mha = 2.0 * tokens * H * hd;
  const double macs_mla = static_cast<double>(tokens) * H * (2.0 * R + D) + 2.0 * H * hd * R;
  const bool labelled = f.source.find("random weights") != std::string::npos;
  std::printf(
      "%s%s: decode attention over %d cached tokens, one layer, %s cache, "
      "block %d, %d thread(s); median of %d x %d calls\n",
      labelled ? "" : "[random weights] ", f.source.c_str(), tokens, f.format.c_str(), f.block_size,
      f.threads, f.repeat, f.calls);
  std::printf("  %-34s %10s %14s %16s %14s\n", "kernel", "us/call", "vs MHA time",
              "cache bytes/token", "multiply-adds");
  std::printf("  %-34s %10.1f %13.2fx %16s %14s\n", "MHA (128 KV heads x 128, K and V)",
              m_mha * 1e6, 1.0, with_commas(static_cast<std::int64_t>(b_mha)).c_str(),
              with_commas(static_cast<std::int64_t>(macs_mha)).c_str());
  char label[64];
  std::snprintf(label, sizeof label, "MLA absorbed (latent %d + RoPE %d)", R, D);
  std::printf("  %-34s %10.1f %13.2fx %16s %14s\n", label, m_mla * 1e6, m_mla / m_mha,
              with_commas(static_cast<std::int64_t>(b_mla)).c_str(),
              with_commas(static_cast<std::int64_t>(macs_mla)).c_str());
  std::printf(
      "  cache read per call: MHA %s, MLA %s (%.1fx less); MLA does %.1fx the multiply-adds\n",
      human_bytes(b_mha * tokens).c_str(), human_bytes(b_mla * tokens).c_str(), b_mha / b_mla,
      macs_mla / macs_mha);
}

}  // namespace

int bench_mla(const Args& args) {
  std::string source;
  const ModelConfig c =
      model_config_for(args.get("--model", "synthetic:deepseek-v3-mla-dims"), &source);
  if (c.mla_kv_lora_rank <= 0) {
    fail_expected("--model", "a shape with MLA dims (e.g. synthetic:deepseek-v3-mla-dims)",
                  "'" + source + "'");
  }
  const int tokens = args.get_int("--tokens", 1024);
  const int repeat = std::max(1, args.get_int("--repeat", 7));
  const int block_size = args.get_int("--block-size", 16);
  if (tokens < 1 || tokens > 65536)
    fail_expected("--tokens", "an integer in [1, 65536]", std::to_string(tokens));
  if (block_size < 1 || block_size > 256 || (block_size & (block_size - 1)) != 0) {
    fail_expected("--block-size", "a power of two in [1, 256]", std::to_string(block_size));
  }
  const KvFormat format = parse_kv_format(args.get("--kv-dtype", "fp32"), "--kv-dtype");
  const int threads = args.get_int("--threads", 1);
  auto backend = make_cpu_backend(threads);  // sets the OpenMP thread count
  const int H = c.n_heads, hd = c.head_dim(), R = c.mla_kv_lora_rank, D = c.mla_rope_dim;

  std::mt19937 rng(1);
  KvLayout mha_layout = kv_layout_for(c, block_size, 1, format, format);
  KvLayout mla_layout = mha_layout;
  mla_layout.latent_dim = R;
  mla_layout.rope_heads = 1;
  mla_layout.rope_dim = D;
  const OneLayerCache mha = random_one_layer_cache(mha_layout, tokens, rng);
  const OneLayerCache mla = random_one_layer_cache(mla_layout, tokens, rng);
  // MLA weights of one layer: absorbed query projection W_uk_h^T [H][R][hd] and W_uv [H][hd][R].
  const std::vector<float> w_uk_t = random_vector(static_cast<std::size_t>(H) * R * hd, rng, 0.05f);
  const std::vector<float> w_uv = random_vector(static_cast<std::size_t>(H) * hd * R, rng, 0.05f);
  const std::vector<float> q = random_vector(static_cast<std::size_t>(H) * hd, rng, 1.0f);
  const std::vector<float> q_rope = random_vector(static_cast<std::size_t>(H) * D, rng, 1.0f);
  std::vector<float> out(static_cast<std::size_t>(H) * hd), q_lat(static_cast<std::size_t>(H) * R),
      ctx(q_lat.size()), scratch;
  const AttentionShape shape{H, c.n_kv_heads, hd};
  const cpu::LatentAttentionShape ls = latent_shape(H, hd, R, D);

  auto mha_call = [&] {
    cpu::paged_attention(mha.view(), 0, shape, q.data(), out.data(), tokens - 1, nullptr, scratch);
  };
  // Absorb W_uk into the query, attend over latents, expand the context with W_uv.
  auto mla_call = [&] {
    for (int h = 0; h < H; ++h) {
      cpu::matmul(q_lat.data() + static_cast<std::size_t>(h) * R,
                  q.data() + static_cast<std::size_t>(h) * hd,
                  w_uk_t.data() + static_cast<std::size_t>(h) * R * hd, hd, R);
    }
    cpu::mla_latent_attention(mla.view(), 0, ls, q_lat.data(), q_rope.data(), ctx.data(), scratch);
    for (int h = 0; h < H; ++h) {
      cpu::matmul(out.data() + static_cast<std::size_t>(h) * hd,
                  ctx.data() + static_cast<std::size_t>(h) * R,
                  w_uv.data() + static_cast<std::size_t>(h) * hd * R, R, hd);
    }
  };
  int calls = 1;
  const auto [m_mha, m_mla] = interleaved_medians(mha_call, mla_call, repeat, calls);
  MlaBenchFigures f{source,
                    format.name(),
                    tokens,
                    block_size,
                    threads,
                    repeat,
                    calls,
                    H,
                    hd,
                    R,
                    D,
                    m_mha,
                    m_mla,
                    mha.storage->layout().bytes_per_token(),
                    mla.storage->layout().bytes_per_token()};
  print_mla_bench(f);
  return 0;
}

const Subverb& bench_mla_verb() {
  static const Subverb verb{
      "mla",
      "absorbed latent (MLA) attention vs MHA attention, one layer, same run",
      {"--model", "--tokens", "--kv-dtype", "--block-size", "--threads", "--repeat"},
      {},
      R"(usage: kvscope bench mla [options]

Decode attention over a latent (MLA) cache against the MHA cache of the same shape, one layer,
measured in the same run (interleaved repeats, medians). Random weights and cache: the figure is
the kernel cost, not a quality.

  --model PATH|NAME          the shape (default synthetic:deepseek-v3-mla-dims)
  --tokens N                 context length in tokens (default 1024)
  --kv-dtype F               cache format (default fp32)
  --block-size B             KV block size in tokens (default 16)
  --threads T                CPU threads (default 1)
  --repeat R                 interleaved repeats (default 7)
)",
      bench_mla};
  return verb;
}

}  // namespace kvscope::cli

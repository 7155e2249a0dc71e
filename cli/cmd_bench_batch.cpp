// kvscope bench batch: decode tokens/s with 1, 4, 16, ... sequences running at once, each step one
// Transformer::forward_step over one token of every sequence (the weights read once per step),
// the batch sizes interleaved within each repeat so machine load hits them alike; medians, and
// each size's speed-up over the first. Greedy decoding from distinct start tokens, paged cache.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli/args.h"
#include "engine/backend/cpu/quant_matmul.h"
#include "engine/common/error.h"
#include "engine/infer/transformer.h"
#include "engine/kv/cache_manager.h"
#include "engine/model/locate.h"

namespace kvscope::cli {
namespace {

using Clock = std::chrono::steady_clock;

int argmax(std::span<const float> row) {
  return static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
}

// Seconds for `steps` decode steps of `seqs` sequences, after one untimed step that starts them.
double time_decode(Transformer& t, int seqs, int steps, int block_size) {
  const ModelConfig& c = t.config();
  const int per_seq = (steps + 1 + block_size - 1) / block_size;
  KvLayout layout{c.n_layers, c.n_kv_heads, c.head_dim(), block_size, seqs * per_seq, {}, {}};
  KvCacheManager cache(layout, AllocatorKind::kPaged, c.seq_len, true);
  std::vector<int> next(static_cast<std::size_t>(seqs));
  for (int s = 0; s < seqs; ++s) {
    cache.require_add_sequence(SeqId(s));
    next[static_cast<std::size_t>(s)] = 1 + (s * 7919) % (c.vocab_size - 1);
  }
  const auto vocab = static_cast<std::size_t>(c.vocab_size);
  std::vector<StepToken> step(static_cast<std::size_t>(seqs));
  auto run_step = [&](int pos) {
    for (int s = 0; s < seqs; ++s) {
      cache.require_append_slots(SeqId(s), 1);
      step[static_cast<std::size_t>(s)] = {next[static_cast<std::size_t>(s)], pos,
                                           cache.view(SeqId(s)), true, nullptr};
    }
    const std::span<const float> logits = t.forward_step(step);
    for (std::size_t s = 0; s < next.size(); ++s)
      next[s] = argmax(logits.subspan(s * vocab, vocab));
  };
  run_step(0);
  const auto start = Clock::now();
  for (int pos = 1; pos <= steps; ++pos) run_step(pos);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int bench_batch(const Args& args) {
  LoadedModel loaded =
      load_model(args.get("--model", "synthetic:smollm2-135m"), "", WeightStorage::kMapped,
                 parse_weight_format(args.get("--weight-format", "native"), "--weight-format"));
  const ModelConfig& c = loaded.model->config();
  const std::vector<int> seqs = parse_int_list(args.get("--seqs", "1,4,16"), "--seqs", 1, 256,
                                               "comma-separated sequence counts in [1, 256]");
  const int steps = args.get_int("--steps", 32);
  if (steps < 1 || steps + 1 > c.seq_len) {
    fail_expected("--steps", "an integer in [1, " + std::to_string(c.seq_len - 1) + "]",
                  std::to_string(steps));
  }
  const int repeat = args.get_int("--repeat", 3);
  if (repeat < 1) fail_expected("--repeat", "a positive integer", std::to_string(repeat));
  const int threads = args.get_int("--threads", 0);
  if (threads < 0) fail_expected("--threads", "a non-negative integer", std::to_string(threads));
  const int block_size = args.get_int("--block-size", 16);
  if (block_size < 1 || block_size > 256 || (block_size & (block_size - 1)) != 0)
    fail_expected("--block-size", "a power of two in [1, 256]", std::to_string(block_size));
  auto backend = make_cpu_backend(threads);
  Transformer t(loaded.model, *backend);
  const bool json = args.has("--json");
  const char* label = loaded.model->is_random_weights() ? "[random weights] " : "";
  if (!json) {
    std::fprintf(stderr, "%s%s: %d decode steps per run, %d runs per batch size, interleaved\n",
                 label, loaded.model->source().c_str(), steps, repeat);
  }
  std::vector<std::vector<double>> secs(seqs.size());
  // Warm-up: weights paged in, buffers sized for the largest batch.
  time_decode(t, *std::max_element(seqs.begin(), seqs.end()), 1, block_size);
  for (int r = 0; r < repeat; ++r) {
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      secs[i].push_back(time_decode(t, seqs[i], steps, block_size));
      if (!json) std::fprintf(stderr, "\r  run %d/%d, %d seqs   ", r + 1, repeat, seqs[i]);
    }
  }
  if (!json) std::fputs("\r\033[K", stderr);
  nlohmann::json out = nlohmann::json::array();
  double base = 0.0;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    std::sort(secs[i].begin(), secs[i].end());
    const std::size_t h = secs[i].size() / 2;
    const double median = secs[i].size() % 2 ? secs[i][h] : (secs[i][h - 1] + secs[i][h]) / 2;
    const double tps = static_cast<double>(seqs[i]) * steps / median;
    if (i == 0) base = tps;
    out.push_back({{"seqs", seqs[i]},
                   {"tokens_per_s", tps},
                   {"step_ms", 1000.0 * median / steps},
                   {"speedup_vs_first", tps / base}});
  }
  if (json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("%s%s, %d threads, block %d; weights %s\n", label, loaded.model->source().c_str(),
              threads > 0 ? threads : omp_get_num_procs(), block_size,
              cpu::describe_weight_format(*loaded.model).c_str());
  std::printf("| sequences | tokens/s | ms per step | vs %d seq |\n|---:|---:|---:|---:|\n",
              seqs.front());
  for (const auto& row : out) {
    std::printf("| %d | %.1f | %.2f | %.2fx |\n", row["seqs"].get<int>(),
                row["tokens_per_s"].get<double>(), row["step_ms"].get<double>(),
                row["speedup_vs_first"].get<double>());
  }
  return 0;
}

}  // namespace kvscope::cli

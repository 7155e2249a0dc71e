// kvscope bench weights: decode with the checkpoint mmapped (zero copy) against copied into
// huge-page memory, interleaved runs on the same model, steps and threads.
#include <cstdio>
#include <memory>

#include "cli/backend_flag.h"
#include "cli/bench_decode.h"
#include "cli/bench_verbs.h"
#include "cli/format.h"
#include "cli/model_flags.h"
#include "engine/common/error.h"
#include "engine/model/locate.h"

namespace kvscope::cli {
namespace {

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

}  // namespace

const Subverb& bench_weights_verb() {
  static const Subverb verb{
      "weights",
      "decode speed with the checkpoint mmapped vs copied into huge pages",
      {"--model", "--tokenizer", "--steps", "--threads", "--repeat", "--allocator", "--block-size"},
      {},
      R"(usage: kvscope bench weights [options]

Decode with the checkpoint mmapped (zero copy) against copied into huge-page memory, interleaved
runs, same model, steps and threads; prints the copy/mmap speed ratio. The model must be a file.

  --model PATH|NAME          model (default stories260K.bin)
  --tokenizer PATH           tokenizer (default: found beside the model)
  --steps N                  decode positions from BOS (default 256, at most the model's seq_len)
  --threads T                CPU threads (default: all cores)
  --repeat R                 interleaved runs of each (default 5)
  --allocator paged|contiguous  the KV cache (default contiguous)
  --block-size B             KV block size in tokens (default 16)
)",
      bench_weights};
  return verb;
}

}  // namespace kvscope::cli

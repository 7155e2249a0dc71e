// kvscope bench kv: paged against contiguous decode on the same model and steps, interleaved
// runs; the paged/contiguous time ratio.
#include <cstdio>

#include "cli/backend_flag.h"
#include "cli/bench_decode.h"
#include "cli/bench_verbs.h"
#include "cli/model_flags.h"
#include "engine/model/locate.h"

namespace kvscope::cli {
namespace {

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

}  // namespace

const Subverb& bench_kv_verb() {
  static const Subverb verb{
      "kv",
      "paged vs contiguous decode cost on the same model, interleaved runs",
      {"--model", "--tokenizer", "--steps", "--threads", "--repeat", "--allocator", "--block-size"},
      {},
      R"(usage: kvscope bench kv [options]

Paged (block 16 unless --block-size) against contiguous decode, interleaved runs on the same model
and steps; prints the paged/contiguous time ratio (minimum and median).

  --model PATH|NAME          model (default stories260K.bin)
  --tokenizer PATH           tokenizer (default: found beside the model)
  --steps N                  decode positions from BOS (default 512, at most the model's seq_len)
  --threads T                CPU threads (default: all cores)
  --repeat R                 interleaved runs of each (default 15)
  --allocator paged|contiguous  the KV cache (both are run; this flag is read and checked)
  --block-size B             KV block size in tokens (default 16)
)",
      bench_kv};
  return verb;
}

}  // namespace kvscope::cli

// See bench_decode.h.
#include "cli/bench_decode.h"

#include "engine/common/error.h"

namespace kvscope::cli {

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

}  // namespace kvscope::cli

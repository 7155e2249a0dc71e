// What the decode benchmarks (bench generate, weights, kv) share: timed greedy generations,
// interleaved runs of two setups, medians, and the --steps, --repeat, --allocator and
// --block-size flags as they read them.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

#include "cli/args.h"
#include "engine/infer/generate.h"

namespace kvscope::cli {

using Clock = std::chrono::steady_clock;

struct Timing {
  double best_seconds = 0.0;
  double median_seconds = 0.0;
  int tokens = 0;
};

// Times `repeat` greedy generations of `steps` positions from BOS (prefill-free: pure decode).
Timing time_generation(Transformer& t, int steps, int repeat, const GenerateOptions& o);

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

// --allocator (default contiguous) and --block-size (default 16) as generation options.
GenerateOptions options_from(const Args& args);

// --steps as given (an error outside [2, seq_len]), else `fallback` capped at the model's seq_len.
int checked_steps(const Args& args, const ModelConfig& c, int fallback);

// --repeat (default `fallback`): a positive integer.
int checked_repeat(const Args& args, int fallback);

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

}  // namespace kvscope::cli

// kvscope bench alloc: the paged pool's block allocate + free cost at half occupancy.
#include <chrono>
#include <cstdio>
#include <vector>

#include "cli/bench_decode.h"
#include "cli/bench_verbs.h"
#include "engine/common/error.h"
#include "engine/kv/block_pool.h"

namespace kvscope::cli {
namespace {

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

const Subverb& bench_alloc_verb() {
  static const Subverb verb{
      "alloc", "BlockPool allocate + free cost (ns per pair)", {"--blocks", "--ops"},
      {},      R"(usage: kvscope bench alloc [options]

BlockPool allocate + free at half occupancy (allocate one, free the oldest held): ns per pair.

  --blocks N                 blocks in the pool (default 100000)
  --ops M                    allocate + free pairs (default 10000000)
)",        bench_alloc};
  return verb;
}

}  // namespace kvscope::cli

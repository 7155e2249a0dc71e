// Per-step pool figures derived from the cache manager: blocks, token slots, internal
// fragmentation, contiguous reservation waste, external fragmentation. UI-free and unit-tested.
#pragma once

#include <span>

#include "engine/kv/cache_manager.h"
#include "engine/trace/timeline.h"

namespace kvscope {

// Fills the pool fields of `m` (blocks_*, slots_*, internal_frag_slots, reservation_waste_slots,
// largest_free_run, free_blocks, kv_bytes_used) and leaves the request counters alone.
//   slots_allocated = used blocks x block_size (a contiguous reservation counts whole)
//   slots_filled    = tokens held by the sequences
//   internal_frag   = empty slots in each sequence's last, partially filled block
//   reservation     = contiguous only: reserved blocks past the last block holding a token
// so slots_allocated = slots_filled + internal_frag + reservation (without sharing).
void fill_pool_metrics(const KvCacheManager& cache, StepMetrics& m);

// Whole-run figures for summaries and docs.
struct RunSummary {
  int steps = 0;
  double mean_utilization = 0.0;  // mean over steps with allocated slots of filled/allocated
  double mean_blocks_used = 0.0;
  int peak_blocks_used = 0;
  double mean_running = 0.0;  // mean batch size (running requests) over steps
  int peak_running = 0;
  std::int64_t preemptions = 0;
  std::int64_t tokens_recomputed = 0;
  std::int64_t prefill_tokens = 0;
  std::int64_t decode_tokens = 0;
  int finished = 0;
  int rejected = 0;
};
RunSummary summarize(std::span<const StepMetrics> metrics);

}  // namespace kvscope

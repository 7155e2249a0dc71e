// Pool metrics and run summaries.
#include "engine/analysis/pool_metrics.h"

#include <algorithm>
#include <vector>

namespace kvscope {

void fill_pool_metrics(const KvCacheManager& cache, StepMetrics& m) {
  const BlockPool& pool = cache.pool();
  const BlockSource* source = cache.block_source();
  const int bs = cache.layout().block_size;
  // Blocks only the prefix cache holds are reusable, not used by any sequence.
  m.blocks_cached_free = 0;
  if (source != nullptr) {
    for (int b = 0; b < pool.num_blocks(); ++b) {
      if (source->is_cached(BlockId(b)) && pool.ref_count(BlockId(b)) == 1) ++m.blocks_cached_free;
    }
  }
  m.blocks_total = pool.num_blocks();
  m.blocks_used = pool.num_used() - m.blocks_cached_free;
  m.free_blocks = pool.num_free();
  m.largest_free_run = pool.largest_free_run();
  m.slots_allocated = static_cast<std::int64_t>(m.blocks_used) * bs;
  m.slots_filled = 0;
  m.internal_frag_slots = 0;
  m.reservation_waste_slots = 0;
  std::vector<bool> seen(source != nullptr ? static_cast<std::size_t>(pool.num_blocks()) : 0);
  for (SeqId id : cache.sequences()) {
    const BlockTable& t = cache.table(id);
    const std::int64_t holding = cache.blocks_for(t.num_tokens);  // blocks with a token
    if (source != nullptr) {                                      // a shared block counts once
      for (std::int64_t l = 0; l < holding; ++l) {
        const auto b = static_cast<std::size_t>(t.blocks[static_cast<std::size_t>(l)].value);
        if (seen[b]) continue;
        seen[b] = true;
        const std::int64_t filled = std::min<std::int64_t>(bs, t.num_tokens - l * bs);
        m.slots_filled += filled;
        m.internal_frag_slots += bs - filled;
      }
    } else {
      m.slots_filled += t.num_tokens;
      m.internal_frag_slots += holding * bs - t.num_tokens;
    }
    m.reservation_waste_slots += (static_cast<std::int64_t>(t.blocks.size()) - holding) * bs;
    // A hybrid run's later layer groups (engine/kv/layer_groups.h): a window's live blocks hold
    // the tokens from its first live block on; a state fills its block.
    for (int g = 1; g < cache.num_groups(); ++g) {
      const std::vector<int> blocks = cache.group_table(g, id);
      std::int64_t live = 0, first = -1;
      for (std::size_t l = 0; l < blocks.size(); ++l) {
        if (blocks[l] < 0) continue;
        ++live;
        if (first < 0) first = static_cast<std::int64_t>(l);
      }
      if (live == 0) continue;
      const std::int64_t filled =
          cache.group(g).kind == LayerKind::kState ? bs : t.num_tokens - first * bs;
      m.slots_filled += filled;
      m.internal_frag_slots += live * bs - filled;
    }
  }
  m.kv_bytes_used = static_cast<std::int64_t>(static_cast<double>(m.slots_allocated) *
                                              cache.layout().bytes_per_token());
}

RunSummary summarize(std::span<const StepMetrics> metrics) {
  RunSummary s;
  s.steps = static_cast<int>(metrics.size());
  double util = 0.0, used = 0.0, running = 0.0;
  int util_steps = 0;
  for (const StepMetrics& m : metrics) {
    if (m.slots_allocated > 0) {
      util += m.utilization();
      ++util_steps;
    }
    used += m.blocks_used;
    running += m.requests_running;
    s.peak_blocks_used = std::max(s.peak_blocks_used, m.blocks_used);
    s.peak_running = std::max(s.peak_running, m.requests_running);
    s.prefill_tokens += m.prefill_tokens;
    s.decode_tokens += m.decode_tokens;
  }
  if (util_steps > 0) s.mean_utilization = util / util_steps;
  if (!metrics.empty()) {
    s.mean_blocks_used = used / static_cast<double>(metrics.size());
    s.mean_running = running / static_cast<double>(metrics.size());
    s.preemptions = metrics.back().preemptions;
    s.tokens_recomputed = metrics.back().tokens_recomputed;
    s.finished = metrics.back().requests_finished;
    s.rejected = metrics.back().requests_rejected;
  }
  return s;
}

}  // namespace kvscope

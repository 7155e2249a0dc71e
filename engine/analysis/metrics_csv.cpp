// CSV writer for per-step metrics.
#include "engine/analysis/metrics_csv.h"

#include <cstdio>
#include <ostream>

#include "engine/common/atomic_write.h"

namespace kvscope {

void write_metrics_csv(const std::string& path, std::span<const StepMetrics> metrics) {
  write_file_atomically(path, [&](std::ostream& out) {
    out << "step,blocks_total,blocks_used,blocks_cached_free,free_blocks,largest_free_run,"
           "slots_allocated,slots_filled,internal_frag_slots,reservation_waste_slots,"
           "utilization,external_fragmentation,requests_waiting,requests_running,"
           "requests_swapped,requests_finished,requests_rejected,preemptions,tokens_recomputed,"
           "prefill_tokens,decode_tokens,prefix_hit_tokens,prompt_tokens,kv_bytes_used\n";
    char ratio[64];
    for (const StepMetrics& m : metrics) {
      out << m.step << ',' << m.blocks_total << ',' << m.blocks_used << ',' << m.blocks_cached_free
          << ',' << m.free_blocks << ',' << m.largest_free_run << ',' << m.slots_allocated << ','
          << m.slots_filled << ',' << m.internal_frag_slots << ',' << m.reservation_waste_slots;
      std::snprintf(ratio, sizeof ratio, ",%.6f,%.6f", m.utilization(), m.external_fragmentation());
      out << ratio << ',' << m.requests_waiting << ',' << m.requests_running << ','
          << m.requests_swapped << ',' << m.requests_finished << ',' << m.requests_rejected << ','
          << m.preemptions << ',' << m.tokens_recomputed << ',' << m.prefill_tokens << ','
          << m.decode_tokens << ',' << m.prefix_hit_tokens << ',' << m.prompt_tokens << ','
          << m.kv_bytes_used << '\n';
    }
  });
}

}  // namespace kvscope

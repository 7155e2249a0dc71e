// The KV tiers of a Simulator run, as figures and sentences for `kvscope run`'s summary and the
// run report: per tier what was written and reloaded, the measured time and bandwidth of that
// I/O, and what recomputing the reloaded tokens would have cost at the prefill rate measured in
// the same run (the forward time of its prefill-only steps per token).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvscope {

class Simulator;

struct TierFigures {
  std::string name;
  std::string medium;  // "host", "disk"
  std::string file;    // disk: the tier's file ("" otherwise)
  int capacity_blocks = 0;
  double capacity_bytes = 0;
  std::int64_t blocks_written = 0;
  std::int64_t blocks_read = 0;  // reloads and pass-downs to the next tier
  double write_seconds = 0, read_seconds = 0;
  std::int64_t reloaded_blocks = 0;  // into the pool, for a prompt
  std::int64_t reloaded_tokens = 0;
  double reload_seconds = 0;
  // Recomputing the reloaded tokens at the run's measured prefill rate (0 when not measured).
  double recompute_seconds = 0;
  std::int64_t corrupt_reads = 0;
  std::int64_t failed_writes = 0;
  std::string first_failure;
};

struct TiersReport {
  bool with_bytes = false;               // false: bookkeeping only, no bytes and no timings
  double block_bytes = 0;                // one block, every layer, K and V
  double prefill_seconds_per_token = 0;  // 0: no step ran prefill alone
  std::int64_t prefill_tokens_timed = 0;
  bool prefetch = false;
  double load_seconds = 0;     // reading the reloaded blocks (prefetch thread and admission)
  double exposed_seconds = 0;  // of it, what admission waited for
  std::vector<TierFigures> tiers;
};

// The run's tiers; empty `tiers` when it had none.
TiersReport tiers_report(const Simulator& sim);
nlohmann::json tiers_report_json(const TiersReport& r);
// One sentence per tier, then the prefill rate they are weighed against (none without tiers).
std::vector<std::string> tiers_report_lines(const TiersReport& r);

}  // namespace kvscope

// KV tier figures of a run: I/O measured by the tier store, recompute at the run's prefill rate.
#include "engine/report/tier_report.h"

#include <cstdio>

#include "engine/analysis/memory_math.h"
#include "engine/sched/simulator.h"

namespace kvscope {
namespace {

// Bandwidth in decimal units, as storage is quoted.
std::string rate(double bytes, double seconds) {
  if (seconds <= 0) return "n/a";
  const double b = bytes / seconds;
  char buf[32];
  if (b >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.2f GB/s", b / 1e9);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MB/s", b / 1e6);
  }
  return buf;
}

std::string count(std::int64_t n, const char* one, const char* many) {
  return format_count(n) + " " + (n == 1 ? one : many);
}

}  // namespace

TiersReport tiers_report(const Simulator& sim) {
  TiersReport r;
  const KvTiers* tiers = sim.tiers();
  if (tiers == nullptr) return r;
  const KvTierStore* store = &tiers->store();
  r.with_bytes = store->with_bytes();
  r.block_bytes = static_cast<double>(store->block_bytes());
  r.prefill_tokens_timed = sim.prefill_only_tokens();
  r.prefetch = sim.config().tier_prefetch;
  r.load_seconds = tiers->load_seconds();
  r.exposed_seconds = tiers->exposed_seconds();
  if (r.with_bytes && r.prefill_tokens_timed > 0)
    r.prefill_seconds_per_token =
        sim.prefill_only_seconds() / static_cast<double>(r.prefill_tokens_timed);
  const int block_size = sim.config().block_size;
  for (int k = 0; k < store->num_tiers(); ++k) {
    const KvTierOptions& o = store->options(k);
    const KvTierIo io = tiers->io(k);
    TierFigures t;
    t.name = o.name;
    t.medium = tier_medium_name(o.medium);
    t.file = store->file_path(k);
    t.capacity_blocks = o.capacity_blocks;
    t.capacity_bytes = r.block_bytes * o.capacity_blocks;
    t.blocks_written = io.blocks_written;
    t.blocks_read = io.blocks_read;
    t.write_seconds = io.write_seconds;
    t.read_seconds = io.read_seconds;
    t.reloaded_blocks = tiers->reloads()[static_cast<std::size_t>(k)].blocks;
    t.reloaded_tokens = t.reloaded_blocks * block_size;
    t.reload_seconds = tiers->reloads()[static_cast<std::size_t>(k)].seconds;
    t.recompute_seconds = r.prefill_seconds_per_token * static_cast<double>(t.reloaded_tokens);
    t.corrupt_reads = io.corrupt_reads;
    t.failed_writes = io.failed_writes;
    t.first_failure = io.first_failure;
    r.tiers.push_back(std::move(t));
  }
  return r;
}

nlohmann::json tiers_report_json(const TiersReport& r) {
  nlohmann::json tiers = nlohmann::json::array();
  for (const TierFigures& t : r.tiers) {
    tiers.push_back({{"name", t.name},
                     {"medium", t.medium},
                     {"capacity_blocks", t.capacity_blocks},
                     {"capacity_bytes", t.capacity_bytes},
                     {"blocks_written", t.blocks_written},
                     {"blocks_read", t.blocks_read},
                     {"write_seconds", t.write_seconds},
                     {"read_seconds", t.read_seconds},
                     {"reloaded_blocks", t.reloaded_blocks},
                     {"reloaded_tokens", t.reloaded_tokens},
                     {"reload_seconds", t.reload_seconds},
                     {"recompute_seconds_estimate", t.recompute_seconds},
                     {"corrupt_reads", t.corrupt_reads},
                     {"failed_writes", t.failed_writes},
                     {"first_failure", t.first_failure}});
  }
  return {{"with_bytes", r.with_bytes},
          {"prefetch", r.prefetch},
          {"reload_read_seconds", r.load_seconds},
          {"reload_waited_seconds", r.exposed_seconds},
          {"block_bytes", r.block_bytes},
          {"prefill_seconds_per_token", r.prefill_seconds_per_token},
          {"prefill_tokens_timed", r.prefill_tokens_timed},
          {"tiers", std::move(tiers)}};
}

std::vector<std::string> tiers_report_lines(const TiersReport& r) {
  std::vector<std::string> lines;
  for (const TierFigures& t : r.tiers) {
    std::string s = "tier " + t.name + " (" +
                    (t.medium == "host" ? std::string("RAM") : "disk file") + ", " +
                    count(t.capacity_blocks, "block", "blocks");
    if (r.with_bytes) s += " = " + format_bytes(t.capacity_bytes);
    s += "): " + count(t.reloaded_blocks, "block", "blocks") + " reloaded (" +
         format_count(t.reloaded_tokens) + " prompt tokens not recomputed), " +
         count(t.blocks_written, "block", "blocks") + " written";
    if (!r.with_bytes) {
      lines.push_back(s + " (bookkeeping only: no bytes moved, nothing timed)");
      continue;
    }
    s += "; reads " + format_ms(t.read_seconds) + " (" +
         rate(r.block_bytes * static_cast<double>(t.blocks_read), t.read_seconds) + "), writes " +
         format_ms(t.write_seconds) + " (" +
         rate(r.block_bytes * static_cast<double>(t.blocks_written), t.write_seconds) + ")";
    if (t.reloaded_blocks > 0 && r.prefill_seconds_per_token > 0) {
      const double saved = t.recompute_seconds - t.reload_seconds;
      char ratio[32];
      std::snprintf(ratio, sizeof ratio, "%.1fx", t.recompute_seconds / t.reload_seconds);
      s += "; the reloads took " + format_ms(t.reload_seconds) +
           " where recomputing would take about " + format_ms(t.recompute_seconds) + ": " +
           (saved >= 0 ? "saved " + format_ms(saved) + ", " + ratio + " faster"
                       : "cost " + format_ms(-saved) + " more than recomputing");
    }
    if (t.corrupt_reads + t.failed_writes > 0) {
      s += "; " + count(t.corrupt_reads, "block", "blocks") + " failed its check, " +
           count(t.failed_writes, "write", "writes") + " refused: " + t.first_failure;
    }
    lines.push_back(s);
  }
  if (!r.tiers.empty() && r.with_bytes && r.load_seconds > 0) {
    const double hidden = 1.0 - r.exposed_seconds / r.load_seconds;
    std::string s = std::string("prefetch ") +
                    (r.prefetch ? "on (an IO thread reads a request's tier blocks from its arrival)"
                                : "off (every reload is read at admission)") +
                    ": the reloads read for " + format_ms(r.load_seconds) + ", admission waited " +
                    format_ms(r.exposed_seconds);
    if (hidden >= 0) {
      char share[32];
      std::snprintf(share, sizeof share, ": %.0f%% hidden", 100.0 * hidden);
      s += share;
    } else {
      // Admitted in the step they arrived: the wait is the whole read plus the thread hand-off.
      s += ": nothing hidden (requests admitted as they arrived; waking the IO thread took " +
           format_ms(r.exposed_seconds - r.load_seconds) + " more)";
    }
    lines.push_back(s);
  }
  if (!r.tiers.empty() && r.with_bytes) {
    char buf[200];
    if (r.prefill_tokens_timed > 0) {
      std::snprintf(buf, sizeof buf,
                    "recompute is weighed at %.1f us per prompt token: this run's forward time of "
                    "steps that ran prefill alone (%s tokens)",
                    r.prefill_seconds_per_token * 1e6,
                    format_count(r.prefill_tokens_timed).c_str());
      lines.emplace_back(buf);
    } else {
      lines.emplace_back("recompute not weighed: no step of this run ran prefill alone");
    }
  }
  return lines;
}

}  // namespace kvscope

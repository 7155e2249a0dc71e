// report.md: what happened in the run, in plain words, then the key figures, plots, requests and
// the memory arithmetic for the model's shape. Every number comes from the Timeline or the shape.
#include <cstdio>
#include <sstream>

#include "engine/analysis/memory_math.h"
#include "engine/prefix/eviction_policy.h"
#include "engine/prefix/prefix_index.h"
#include "engine/report/run_report.h"
#include "engine/report/tier_report.h"

namespace kvscope {
namespace {

std::string pct(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * fraction);
  return buf;
}

std::string fixed(double v, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string n(std::int64_t v) {
  return format_count(v);
}

const char* plural(std::int64_t v, const char* one, const char* many) {
  return v == 1 ? one : many;
}

void what_happened(std::ostream& o, const Simulator& sim, const RunFigures& f) {
  const SimConfig& c = sim.config();
  const int requests = sim.num_requests();
  const int unfinished = requests - f.finished - f.rejected;
  o << "## What happened\n\n";
  o << n(requests) << " " << plural(requests, "request", "requests")
    << " (parallel samples count separately) shared a pool of " << n(f.blocks_total)
    << " blocks of " << f.block_size << " tokens (" << allocator_name(c.allocator)
    << " allocation) for " << n(f.steps) << " " << plural(f.steps, "step", "steps") << ". "
    << n(f.finished) << " finished, " << n(f.rejected) << " were rejected";
  if (unfinished > 0)
    o << " and " << n(unfinished) << " were still unfinished when the run stopped";
  o << ". The run processed " << n(f.prefill_tokens) << " prompt tokens (prefill, recomputation "
    << "included) and " << n(f.decode_tokens) << " decode tokens; on average "
    << fixed(f.mean_running, 2) << " requests ran per step (at most " << f.peak_running << ").\n\n";
  if (f.preemptions == 0) {
    o << "No request was preempted: the pool never ran out of blocks for the running requests.\n\n";
  } else {
    o << "The pool ran out of blocks and the scheduler preempted a running request "
      << n(f.preemptions) << " " << plural(f.preemptions, "time", "times") << " ("
      << preemption_name(c.preemption) << ", victim: " << victim_name(c.victim) << ")";
    if (f.tokens_recomputed > 0)
      o << "; " << n(f.tokens_recomputed) << " tokens had to be recomputed";
    o << ".\n\n";
  }
  if (c.prefix_caching) {
    o << "Prefix caching was on (" << index_kind_name(c.prefix_index) << " index, "
      << eviction_policy_name(c.cached_block_eviction)
      << " eviction of cached blocks): " << n(f.prefix_hit_tokens) << " of " << n(f.prompt_tokens)
      << " prompt tokens (" << pct(f.prefill_saved_fraction())
      << ") came from shared blocks, so their prefill was skipped.\n\n";
    const std::vector<std::string> tiers = tiers_report_lines(tiers_report(sim));
    if (!tiers.empty()) {
      o << "KV tiers behind the prefix cache (cached blocks the pool evicted were written back to "
           "them, and reloaded instead of recomputed when a prompt needed them again):\n\n";
      for (const std::string& line : tiers) o << "- " << line << "\n";
      o << "\n";
    }
  } else {
    o << "Prefix caching was off: every prompt token was computed.\n\n";
  }
  const StepMetrics& peak = sim.timeline()->metrics(f.peak_step);
  o << "At the busiest step (" << f.peak_step << ") the requests held " << n(peak.blocks_used)
    << " of " << n(f.blocks_total) << " blocks (" << pct(f.peak_block_occupancy)
    << " of the pool, block-level) "
    << "but those blocks held " << n(peak.slots_filled) << " tokens in " << n(peak.slots_allocated)
    << " slots (" << pct(peak.utilization()) << " of the allocated slots; "
    << pct(static_cast<double>(peak.slots_filled) /
           (static_cast<double>(f.blocks_total) * f.block_size))
    << " of the pool's slots, token-level). The difference is " << n(peak.internal_frag_slots)
    << " empty slots at the ends of last blocks (internal fragmentation)";
  if (peak.reservation_waste_slots > 0)
    o << " and " << n(peak.reservation_waste_slots)
      << " slots reserved but not yet used (reservation waste)";
  o << ". Over the whole run the blocks were " << pct(f.mean_block_occupancy)
    << " used on average and the pool's token slots " << pct(f.mean_token_occupancy) << ".\n\n";
  o << "The largest run of consecutive free blocks fell to " << n(f.min_largest_free_run)
    << " (step " << f.min_largest_free_run_step << ")"
    << (c.allocator == AllocatorKind::kPaged
            ? "; paged allocation never needs consecutive free blocks, so this costs it nothing."
            : "; the contiguous baseline needs a whole reservation in one run, so this decides "
              "what it can admit.")
    << "\n\n";
}

void key_figures(std::ostream& o, const Simulator& sim, const RunFigures& f, double per_token) {
  const double pool_bytes = per_token * static_cast<double>(f.blocks_total) * f.block_size;
  o << "## Key figures\n\n"
    << "Sizes are given in binary units (1 GiB = 2^30 bytes) with the decimal figure beside them "
       "(1 GB = 10^9 bytes).\n\n"
    << "| figure | value |\n|---|---|\n"
    << "| steps | " << n(f.steps) << " |\n"
    << "| requests: finished / rejected / unfinished | " << f.finished << " / " << f.rejected
    << " / " << sim.num_requests() - f.finished - f.rejected << " |\n"
    << "| prefill tokens / decode tokens | " << n(f.prefill_tokens) << " / " << n(f.decode_tokens)
    << " |\n"
    << "| preemptions (tokens recomputed) | " << n(f.preemptions) << " (" << n(f.tokens_recomputed)
    << ") |\n"
    << "| prompt tokens served by the prefix cache (prefill saved) | " << n(f.prefix_hit_tokens)
    << " of " << n(f.prompt_tokens) << " (" << pct(f.prefill_saved_fraction()) << ") |\n"
    << "| block-level occupancy: peak / mean | " << pct(f.peak_block_occupancy) << " / "
    << pct(f.mean_block_occupancy) << " |\n"
    << "| token-level occupancy: peak / mean | " << pct(f.peak_token_occupancy) << " / "
    << pct(f.mean_token_occupancy) << " |\n"
    << "| tokens held / allocated slots: mean / lowest | " << pct(f.mean_slot_utilization) << " / "
    << pct(f.min_slot_utilization) << " |\n"
    << "| internal fragmentation (slots): peak / mean | " << n(f.peak_internal_frag_slots) << " / "
    << fixed(f.mean_internal_frag_slots, 1) << " |\n"
    << "| reservation waste (slots): peak / mean | " << n(f.peak_reservation_waste_slots) << " / "
    << fixed(f.mean_reservation_waste_slots, 1) << " |\n"
    << "| largest free run (blocks): lowest / at the end | " << n(f.min_largest_free_run) << " / "
    << n(f.final_largest_free_run) << " |\n"
    << "| KV bytes per token (exact, this run's formats) | " << fixed(per_token, 2) << " B |\n"
    << "| pool size | " << format_bytes(pool_bytes) << " ("
    << n(static_cast<std::int64_t>(pool_bytes)) << " bytes) |\n"
    << "| peak KV bytes allocated (step " << f.peak_kv_bytes_step << ") | "
    << format_bytes(static_cast<double>(f.peak_kv_bytes_used)) << " (" << n(f.peak_kv_bytes_used)
    << " bytes) |\n\n";
}

void memory_section(std::ostream& o, const ModelConfig& shape, const RunFigures& f,
                    double per_token, const std::string& kv_format) {
  o << "## Memory vs context for this shape\n\n"
    << "bytes per token = 2 (K and V) x " << shape.n_layers << " layers x " << shape.n_kv_heads
    << " KV heads x " << shape.head_dim()
    << " head_dim x bytes per element. Payload only; quantized "
       "formats add their scales (this run's exact figure, scales included, is in the table "
       "above).\n\n"
    << "| format | bytes per token | at " << n(shape.seq_len)
    << " tokens (trained context) | at 131,072 tokens |\n"
    << "|---|---|---|---|\n";
  const struct {
    const char* name;
    double bytes;
  } formats[] = {{"fp32", 4}, {"fp16 / bf16", 2}, {"fp8 / int8", 1}, {"int4", 0.5}};
  for (const auto& fmt : formats) {
    const double b = kv_bytes_per_token(shape, fmt.bytes);
    o << "| " << fmt.name << " | " << n(static_cast<std::int64_t>(b)) << " | "
      << format_bytes(kv_bytes_at(b, shape.seq_len)) << " | "
      << format_bytes(kv_bytes_at(b, 131072)) << " |\n";
  }
  o << "\nMeasured in this run (" << kv_format << ", " << fixed(per_token, 2)
    << " B/token): at step " << f.peak_kv_bytes_step << " the pool had "
    << format_bytes(static_cast<double>(f.peak_kv_bytes_used))
    << " allocated, the run's largest (allocated slots x exact bytes per token, so the empty slots "
       "of "
       "last blocks count).\n\n";
}

void requests_section(std::ostream& o, const Simulator& sim) {
  constexpr int kMaxRows = 64;
  o << "## Requests\n\n| id | arrival | prompt | generated | prefix hits | preemptions | admitted "
       "| "
       "finished | outcome |\n|---|---|---|---|---|---|---|---|---|\n";
  auto step = [](const std::optional<int>& s) { return s ? std::to_string(*s) : std::string("-"); };
  const int rows = std::min(sim.num_requests(), kMaxRows);
  for (int i = 0; i < rows; ++i) {
    const RequestRun& r = sim.request(i);
    std::string outcome = request_phase_name(r.phase);
    if (r.phase == RequestPhase::kRejected) outcome += ": " + r.reject_reason;
    for (char& ch : outcome)
      if (ch == '|' || ch == '\n') ch = ' ';
    o << "| " << r.id << " | " << r.spec.arrival_step << " | " << r.spec.prompt_tokens.size()
      << " | " << r.generated << " | " << r.prefix_hit_tokens << " | " << r.preemptions << " | "
      << step(r.admitted_step) << " | " << step(r.finished_step) << " | " << outcome << " |\n";
  }
  if (sim.num_requests() > rows)
    o << "\n(" << n(sim.num_requests() - rows) << " more in report.json.)\n";
  o << "\n";
}

}  // namespace

std::string run_report_markdown(const RunReportInfo& info, const ModelConfig& shape,
                                const Simulator& sim, const RunFigures& f,
                                const std::vector<ReportPlot>& plots) {
  const TimelineHeader& h = sim.timeline()->header();
  std::ostringstream o;
  o << "# " << (info.title.empty() ? info.scenario_path : info.title) << "\n\n";
  if (!info.description.empty()) o << info.description << "\n\n";
  if (report_random_weights(info, *sim.timeline()))
    o << "**Random weights**: this model has seeded random weights at a real or chosen shape. Its "
         "memory and allocator figures are real; its tokens mean nothing.\n\n";
  if (info.bookkeeping_only)
    o << "**Bookkeeping only**: no forward pass ran; every generated token is 0 and only "
         "max_new_tokens stops a request. Block accounting is real.\n\n";
  o << "- scenario: `" << info.scenario_path << "`\n- model: " << info.model_name << " ("
    << shape.describe() << ")\n- cache: " << allocator_name(sim.config().allocator)
    << ", block size " << f.block_size << ", " << n(f.blocks_total) << " blocks, K/V format "
    << h.kv_format << "\n";
  if (!info.command.empty()) o << "- command: `" << info.command << "`\n";
  o << "\n";
  what_happened(o, sim, f);
  key_figures(o, sim, f, h.kv_bytes_per_token);
  o << "## Plots\n\n";
  for (const ReportPlot& p : plots) o << "![" << p.title << "](" << p.file << ")\n\n";
  requests_section(o, sim);
  memory_section(o, shape, f, h.kv_bytes_per_token, h.kv_format);
  if (report_random_weights(info, *sim.timeline())) {
    const MemoryWallSpec spec = report_memory_wall_spec(info, shape, sim.config());
    o << "## The memory wall for this shape\n\nHow much context fits in the KV cache beside the "
         "weights (see memwall.png; `kvscope memwall --help` for other GPUs and formats):\n\n"
      << memory_wall_markdown(spec, compute_memory_wall(spec)) << "\n";
  }
  o << "## Files\n\nreport.json (every per-step metric and this summary); `kvscope run` also "
       "writes metrics.csv (the per-step "
       "metrics as CSV), recording.kvr (open it in kvscope-ui), trace.json (Chrome trace: open in "
       "https://ui.perfetto.dev), and the PNG plots above.\n";
  return o.str();
}

}  // namespace kvscope

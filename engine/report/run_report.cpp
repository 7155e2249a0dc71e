// The run report: whole-run figures, report.json, and the writer that puts every file in place.
#include "engine/report/run_report.h"

#include <algorithm>
#include <cstdio>
#include <ostream>

#include "engine/analysis/memory_math.h"
#include "engine/common/atomic_write.h"
#include "engine/common/error.h"
#include "engine/prefix/eviction_policy.h"
#include "engine/prefix/prefix_index.h"
#include "engine/report/tier_report.h"

namespace kvscope {

RunFigures run_figures(std::span<const StepMetrics> metrics, int block_size) {
  if (metrics.empty()) fail_expected("run report", "a run with at least one step", "0 steps");
  if (block_size < 1)
    fail_expected("run report: block_size", "a positive integer", std::to_string(block_size));
  RunFigures f;
  f.steps = static_cast<int>(metrics.size());
  f.block_size = block_size;
  f.blocks_total = metrics.front().blocks_total;
  const double pool_slots = static_cast<double>(f.blocks_total) * block_size;
  double block_occ = 0, token_occ = 0, util = 0, frag = 0, reserve = 0, running = 0;
  int util_steps = 0;
  f.min_largest_free_run = metrics.front().largest_free_run;
  for (const StepMetrics& m : metrics) {
    f.prefill_tokens += m.prefill_tokens;
    f.decode_tokens += m.decode_tokens;
    running += m.requests_running;
    f.peak_running = std::max(f.peak_running, m.requests_running);
    const double bo = f.blocks_total ? static_cast<double>(m.blocks_used) / f.blocks_total : 0.0;
    const double to = pool_slots > 0 ? static_cast<double>(m.slots_filled) / pool_slots : 0.0;
    block_occ += bo;
    token_occ += to;
    if (m.blocks_used > f.peak_blocks_used) {
      f.peak_blocks_used = m.blocks_used;
      f.peak_step = m.step;
    }
    f.peak_block_occupancy = std::max(f.peak_block_occupancy, bo);
    f.peak_token_occupancy = std::max(f.peak_token_occupancy, to);
    f.peak_slots_filled = std::max(f.peak_slots_filled, m.slots_filled);
    if (m.slots_allocated > 0) {
      util += m.utilization();
      f.min_slot_utilization = std::min(f.min_slot_utilization, m.utilization());
      ++util_steps;
    }
    frag += static_cast<double>(m.internal_frag_slots);
    reserve += static_cast<double>(m.reservation_waste_slots);
    f.peak_internal_frag_slots = std::max(f.peak_internal_frag_slots, m.internal_frag_slots);
    f.peak_reservation_waste_slots =
        std::max(f.peak_reservation_waste_slots, m.reservation_waste_slots);
    if (m.largest_free_run < f.min_largest_free_run) {
      f.min_largest_free_run = m.largest_free_run;
      f.min_largest_free_run_step = m.step;
    }
    f.peak_external_fragmentation =
        std::max(f.peak_external_fragmentation, m.external_fragmentation());
    if (m.kv_bytes_used > f.peak_kv_bytes_used) {
      f.peak_kv_bytes_used = m.kv_bytes_used;
      f.peak_kv_bytes_step = m.step;
    }
  }
  const double n = static_cast<double>(metrics.size());
  f.mean_block_occupancy = block_occ / n;
  f.mean_token_occupancy = token_occ / n;
  f.mean_slot_utilization = util_steps ? util / util_steps : 1.0;
  f.mean_internal_frag_slots = frag / n;
  f.mean_reservation_waste_slots = reserve / n;
  f.mean_running = running / n;
  const StepMetrics& last = metrics.back();
  f.preemptions = last.preemptions;
  f.tokens_recomputed = last.tokens_recomputed;
  f.prompt_tokens = last.prompt_tokens;
  f.prefix_hit_tokens = last.prefix_hit_tokens;
  f.finished = last.requests_finished;
  f.rejected = last.requests_rejected;
  f.final_largest_free_run = last.largest_free_run;
  return f;
}

namespace {

nlohmann::json step_json(const StepMetrics& m) {
  return {{"step", m.step},
          {"blocks_total", m.blocks_total},
          {"blocks_used", m.blocks_used},
          {"blocks_cached_free", m.blocks_cached_free},
          {"free_blocks", m.free_blocks},
          {"largest_free_run", m.largest_free_run},
          {"slots_allocated", m.slots_allocated},
          {"slots_filled", m.slots_filled},
          {"internal_frag_slots", m.internal_frag_slots},
          {"reservation_waste_slots", m.reservation_waste_slots},
          {"utilization", m.utilization()},
          {"external_fragmentation", m.external_fragmentation()},
          {"requests_waiting", m.requests_waiting},
          {"requests_running", m.requests_running},
          {"requests_swapped", m.requests_swapped},
          {"requests_finished", m.requests_finished},
          {"requests_rejected", m.requests_rejected},
          {"preemptions", m.preemptions},
          {"tokens_recomputed", m.tokens_recomputed},
          {"prefill_tokens", m.prefill_tokens},
          {"decode_tokens", m.decode_tokens},
          {"prefix_hit_tokens", m.prefix_hit_tokens},
          {"prompt_tokens", m.prompt_tokens},
          {"kv_bytes_used", m.kv_bytes_used}};
}

nlohmann::json opt_step(const std::optional<int>& s) {
  return s ? nlohmann::json(*s) : nlohmann::json(nullptr);
}

nlohmann::json model_json(const RunReportInfo& info, const ModelConfig& shape, const Timeline& t) {
  return {{"name", info.model_name},
          {"random_weights", report_random_weights(info, t)},
          {"bookkeeping_only", info.bookkeeping_only},
          {"layers", shape.n_layers},
          {"heads", shape.n_heads},
          {"kv_heads", shape.n_kv_heads},
          {"head_dim", shape.head_dim()},
          {"seq_len", shape.seq_len},
          {"params", shape.num_params()}};
}

nlohmann::json config_json(const SimConfig& c) {
  return {{"allocator", allocator_name(c.allocator)},
          {"block_size", c.block_size},
          {"num_blocks", c.num_blocks},
          {"max_seq_len", c.max_seq_len},
          {"preemption", preemption_name(c.preemption)},
          {"victim", victim_name(c.victim)},
          {"host_blocks", c.host_blocks},
          {"max_tokens_per_step", c.max_tokens_per_step},
          {"max_running", c.max_running},
          {"k_format", c.k_format.name()},
          {"v_format", c.v_format.name()},
          {"prefix_caching", c.prefix_caching},
          {"prefix_index", std::string(index_kind_name(c.prefix_index))},
          {"cached_block_eviction", std::string(eviction_policy_name(c.cached_block_eviction))}};
}

nlohmann::json summary_json(const Simulator& sim, const RunFigures& f) {
  nlohmann::json s;
  s["steps"] = f.steps;
  s["requests"] = sim.num_requests();
  s["finished"] = f.finished;
  s["rejected"] = f.rejected;
  s["unfinished"] = sim.num_requests() - f.finished - f.rejected;
  s["prefill_tokens"] = f.prefill_tokens;
  s["decode_tokens"] = f.decode_tokens;
  s["preemptions"] = f.preemptions;
  s["tokens_recomputed"] = f.tokens_recomputed;
  s["prompt_tokens"] = f.prompt_tokens;
  s["prefix_hit_tokens"] = f.prefix_hit_tokens;
  s["prefill_saved_fraction"] = f.prefill_saved_fraction();
  s["mean_running"] = f.mean_running;
  s["peak_running"] = f.peak_running;
  s["peak_step"] = f.peak_step;
  s["peak_blocks_used"] = f.peak_blocks_used;
  s["peak_block_occupancy"] = f.peak_block_occupancy;
  s["mean_block_occupancy"] = f.mean_block_occupancy;
  s["peak_slots_filled"] = f.peak_slots_filled;
  s["peak_token_occupancy"] = f.peak_token_occupancy;
  s["mean_token_occupancy"] = f.mean_token_occupancy;
  s["mean_slot_utilization"] = f.mean_slot_utilization;
  s["min_slot_utilization"] = f.min_slot_utilization;
  s["peak_internal_frag_slots"] = f.peak_internal_frag_slots;
  s["mean_internal_frag_slots"] = f.mean_internal_frag_slots;
  s["peak_reservation_waste_slots"] = f.peak_reservation_waste_slots;
  s["mean_reservation_waste_slots"] = f.mean_reservation_waste_slots;
  s["min_largest_free_run"] = f.min_largest_free_run;
  s["final_largest_free_run"] = f.final_largest_free_run;
  s["peak_external_fragmentation"] = f.peak_external_fragmentation;
  if (const PrefixCache* pc = sim.prefix_cache()) {
    const PrefixCacheMetrics& pm = pc->metrics();
    s["prefix_cache"] = {{"lookups", pm.lookups},
                         {"looked_up_tokens", pm.prompt_tokens},
                         {"hit_tokens", pm.hit_tokens},
                         {"token_hit_rate", pm.token_hit_rate()},
                         {"block_hit_rate", pm.block_hit_rate()},
                         {"evictions", pm.evictions},
                         {"peak_blocks_saved", pm.peak_blocks_saved}};
  }
  if (sim.tiers() != nullptr) s["kv_tiers"] = tiers_report_json(tiers_report(sim));
  return s;
}

nlohmann::json requests_json(const Simulator& sim) {
  // A request's tier reloads against recomputing them at the run's measured prefill rate.
  const double prefill_rate = tiers_report(sim).prefill_seconds_per_token;
  nlohmann::json requests = nlohmann::json::array();
  for (int i = 0; i < sim.num_requests(); ++i) {
    const RequestRun& r = sim.request(i);
    requests.push_back(
        {{"id", r.id},
         {"arrival_step", r.spec.arrival_step},
         {"phase", request_phase_name(r.phase)},
         {"prompt_tokens", r.spec.prompt_tokens.size()},
         {"max_new_tokens", r.spec.max_new_tokens},
         {"generated", r.generated},
         {"output_tokens", r.generated_tokens()},
         {"prefix_hit_tokens", r.prefix_hit_tokens},
         {"tier_hit_tokens", r.tier_hit_tokens},
         {"tier_load_seconds", r.tier_load_seconds},
         {"tier_waited_seconds", r.tier_exposed_seconds},
         {"tier_recompute_seconds_estimate", prefill_rate * static_cast<double>(r.tier_hit_tokens)},
         {"preemptions", r.preemptions},
         {"admitted_step", opt_step(r.admitted_step)},
         {"finished_step", opt_step(r.finished_step)},
         {"reject_reason", r.reject_reason}});
  }
  return requests;
}

}  // namespace

nlohmann::json run_report_json(const RunReportInfo& info, const ModelConfig& shape,
                               const Simulator& sim) {
  const Timeline& t = *sim.timeline();
  const SimConfig& c = sim.config();
  const RunFigures f = run_figures(t.all_metrics(), c.block_size);
  const double per_token = t.header().kv_bytes_per_token;
  nlohmann::json j;
  j["kvscope_report_version"] = 1;
  j["title"] = info.title;
  j["description"] = info.description;
  j["scenario"] = info.scenario_path;
  j["command"] = info.command;
  j["units"] =
      "bytes are plain bytes; where text shows sizes, GB = 10^9 bytes and GiB = 2^30 bytes";
  j["model"] = model_json(info, shape, t);
  j["config"] = config_json(c);
  const double fp16 = kv_bytes_per_token(shape, 2.0);
  j["memory"] = {{"kv_bytes_per_token", per_token},
                 {"kv_bytes_per_token_formula_fp16", fp16},
                 {"pool_bytes", per_token * static_cast<double>(c.num_blocks) * c.block_size},
                 {"peak_kv_bytes_used", f.peak_kv_bytes_used},
                 {"peak_kv_bytes_step", f.peak_kv_bytes_step}};
  j["summary"] = summary_json(sim, f);
  j["requests"] = requests_json(sim);
  nlohmann::json steps = nlohmann::json::array();
  for (const StepMetrics& m : t.all_metrics()) steps.push_back(step_json(m));
  j["steps"] = std::move(steps);
  return j;
}

std::vector<std::string> write_run_report(const RunReportInfo& info, const ModelConfig& shape,
                                          const Simulator& sim, const std::string& out_dir,
                                          const std::function<void(const std::string&)>& progress) {
  const Timeline& t = *sim.timeline();
  const RunFigures f = run_figures(t.all_metrics(), sim.config().block_size);
  std::vector<std::string> written;
  auto note = [&](const std::string& path) {
    written.push_back(path);
    if (progress) progress(path);
  };
  nlohmann::json j = run_report_json(info, shape, sim);
  const std::vector<ReportPlot> plots = write_report_plots(info, shape, sim, f, out_dir, note);
  nlohmann::json files = nlohmann::json::array();
  for (const ReportPlot& p : plots) files.push_back(p.file);
  j["plots"] = std::move(files);
  const std::string json_path = out_dir + "/report.json";
  write_file_atomically(json_path, [&](std::ostream& out) {
    out << j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  });
  note(json_path);
  const std::string md_path = out_dir + "/report.md";
  const std::string md = run_report_markdown(info, shape, sim, f, plots);
  write_file_atomically(md_path, [&](std::ostream& out) { out << md; });
  note(md_path);
  return written;
}

}  // namespace kvscope

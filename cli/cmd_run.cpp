// kvscope run: runs a scenario through the Simulator on the real model and writes the recording,
// a Chrome trace, per-step metrics and the report (report.md, report.json, PNG plots); progress on
// stderr, a short summary on stdout.
#include <cstdio>
#include <filesystem>

#include "cli/args.h"
#include "cli/backend_flag.h"
#include "cli/commands.h"
#include "engine/analysis/metrics_csv.h"
#include "engine/analysis/pool_metrics.h"
#include "engine/common/error.h"
#include "engine/model/locate.h"
#include "engine/report/run_report.h"
#include "engine/report/tier_report.h"
#include "engine/scenario/scenario.h"
#include "engine/sched/simulator.h"

namespace kvscope::cli {
namespace {

constexpr const char* kHelp = R"(usage: kvscope run SCENARIO.json [options]
       kvscope run --validate SCENARIO.json

  --out DIR                        where recording.kvr, trace.json, metrics.csv and the report
                                   (report.md, report.json, *.png) go (default kvscope-out)
  --steps N                        stop after N steps even if requests remain (default: the
                                   scenario's "steps", else 100000)
  --variant NAME                   run this compare variant (default: base, the cache section)
  --validate                       only parse and check the file (every variant, the trace
                                   file found); run nothing
  --model PATH|NAME                override the scenario's model
  --allocator paged|contiguous     override cache.allocator
  --preemption recompute|swap      override cache.preemption
  --bookkeeping                    no model compute: block accounting only (tokens are 0)
  --threads N                      CPU threads for the forward pass (default 1)
%BACKEND%
  --weight-format native|f32       GGUF models: matmuls on the file's quantized blocks (default) or
                                   on weights dequantized to fp32 at load
  --no-report                      skip report.md, report.json and the PNG plots
  --quiet                          no progress on stderr
)";

// --validate: the scenario parsed (every variant, checked by parse_scenario) and its trace exists.
int validate_only(const Scenario& scenario, const std::string& path) {
  if (const auto& t = scenario.workload.trace) {
    locate_trace(t->path, std::filesystem::path(path).parent_path().string(),
                 path + ": " + t->at + ".mooncake");
  }
  std::string names;
  for (const auto& n : scenario.variant_names()) {
    if (!names.empty()) names.append(", ");
    names.append(n);
  }
  std::printf("%s: valid scenario (format %d): \"%s\"; variants: %s; %zu captions\n", path.c_str(),
              scenario.format_version, scenario.title.c_str(), names.c_str(),
              scenario.captions.size());
  return 0;
}

// Steps until done or max_steps, a progress line every 50 steps unless quiet.
void run_steps(Simulator& sim, int max_steps, bool quiet) {
  while (sim.current_step() < max_steps && sim.step()) {
    const int s = sim.current_step() - 1;
    if (quiet || s % 50 != 0) continue;
    const StepMetrics& m = sim.timeline()->metrics(s);
    std::fprintf(stderr,
                 "step %d: running %d, waiting %d, swapped %d, finished %d, blocks %d/%d used\n", s,
                 m.requests_running, m.requests_waiting, m.requests_swapped, m.requests_finished,
                 m.blocks_used, m.blocks_total);
  }
}

void print_prefix_summary(const Simulator& sim, const SimConfig& config) {
  const PrefixCache* pc = sim.prefix_cache();
  if (pc == nullptr) return;
  const Timeline& t = *sim.timeline();
  const PrefixCacheMetrics& pm = pc->metrics();
  const StepMetrics& last = t.metrics(t.num_steps() - 1);
  std::int64_t cow = 0;
  for (const Event& e : t.events()) cow += e.type == EventType::kBlockCopiedOnWrite;
  std::printf(
      "prefix cache (%s index, %s eviction): lookup hit rate %.1f%% of %lld looked-up tokens; "
      "prompt tokens served from shared blocks %lld of %lld (%.1f%%, forks included) = prefill "
      "tokens saved; peak blocks saved by sharing %lld (%.1f KiB); %lld copy-on-write copies, "
      "%lld evictions\n",
      std::string(index_kind_name(config.prefix_index)).c_str(),
      std::string(eviction_policy_name(config.cached_block_eviction)).c_str(),
      100.0 * pm.token_hit_rate(), static_cast<long long>(pm.prompt_tokens),
      static_cast<long long>(last.prefix_hit_tokens), static_cast<long long>(last.prompt_tokens),
      last.prompt_tokens ? 100.0 * static_cast<double>(last.prefix_hit_tokens) /
                               static_cast<double>(last.prompt_tokens)
                         : 0.0,
      static_cast<long long>(pm.peak_blocks_saved),
      static_cast<double>(pm.peak_blocks_saved) * t.header().kv_bytes_per_token *
          config.block_size / 1024.0,
      static_cast<long long>(cow), static_cast<long long>(pm.evictions));
  for (const std::string& line : tiers_report_lines(tiers_report(sim)))
    std::printf("%s\n", line.c_str());
}

// The short summary on stdout: configuration, requests, tokens, utilization, prefix cache,
// rejections.
void print_summary(const Simulator& sim, const SimConfig& config, const std::string& label,
                   bool random_weights, bool bookkeeping_only) {
  const Timeline& t = *sim.timeline();
  const RunSummary s = summarize(t.all_metrics());
  const double peak_pct = 100.0 * s.peak_blocks_used / config.num_blocks;
  std::printf("%s%s: %s allocator, block %d, %d blocks, preemption %s, victim %s%s\n",
              random_weights ? "[random weights] " : "", label.c_str(),
              allocator_name(config.allocator).c_str(), config.block_size, config.num_blocks,
              preemption_name(config.preemption).c_str(), victim_name(config.victim).c_str(),
              bookkeeping_only ? " (bookkeeping only)" : "");
  std::printf(
      "steps %d; requests %d finished, %d rejected, %d unfinished; preemptions %lld (%lld tokens "
      "recomputed)\n",
      s.steps, s.finished, s.rejected, sim.num_requests() - s.finished - s.rejected,
      static_cast<long long>(s.preemptions), static_cast<long long>(s.tokens_recomputed));
  std::printf("tokens: %lld prefill, %lld decode; mean batch %.2f (peak %d)\n",
              static_cast<long long>(s.prefill_tokens), static_cast<long long>(s.decode_tokens),
              s.mean_running, s.peak_running);
  std::printf(
      "KV utilization (filled / allocated slots, mean over steps): %.1f%%; blocks used mean %.1f, "
      "peak %d (%.0f%%)\n",
      100.0 * s.mean_utilization, s.mean_blocks_used, s.peak_blocks_used, peak_pct);
  if (const auto& plan = sim.layer_groups()) {
    for (const std::string& note : plan->notes) std::printf("layer groups: %s\n", note.c_str());
    std::printf("peak K/V: %s (%d blocks of %s)\n",
                format_bytes(static_cast<double>(s.peak_blocks_used) *
                             static_cast<double>(plan->block_bytes()))
                    .c_str(),
                s.peak_blocks_used, format_bytes(static_cast<double>(plan->block_bytes())).c_str());
  }
  print_prefix_summary(sim, config);
  for (int i = 0; i < sim.num_requests(); ++i) {
    if (sim.request(i).phase == RequestPhase::kRejected) {
      std::printf("request %d rejected: %s\n", i, sim.request(i).reject_reason.c_str());
    }
  }
}

// --allocator, --preemption and --threads over the scenario's own settings.
void apply_config_flags(const Args& args, SimConfig& config) {
  if (args.has("--allocator")) {
    config.allocator = parse_allocator(args.get("--allocator"), "--allocator");
    require_paged_for_prefix_caching(config.prefix_caching, config.allocator, "--allocator");
  }
  if (args.has("--preemption"))
    config.preemption = parse_preemption(args.get("--preemption"), "--preemption");
  config.threads = args.get_int("--threads", 1);
}

// The report (report.md, report.json, PNG plots) unless --no-report or no step ran; returns
// whether it was written.
bool write_report_unless_empty(const Args& args, const Argv& argv, const Scenario& scenario,
                               const std::string& path, const std::string& variant,
                               const ScenarioModelLoad& loaded, const Simulator& sim,
                               const std::string& out_dir) {
  const bool quiet = args.has("--quiet");
  const bool report = !args.has("--no-report") && sim.timeline()->num_steps() > 0;
  const std::string label =
      variant == "base" ? scenario.title : scenario.title + " [" + variant + "]";
  if (report) {
    RunReportInfo info;
    info.title = label;
    info.description = scenario.description;
    info.scenario_path = path;
    info.model_name = loaded.source;
    info.random_weights = loaded.random_weights;
    info.bookkeeping_only = loaded.weights == nullptr;
    info.command = "kvscope run";
    for (const std::string& a : argv) info.command.append(" ").append(a);
    write_run_report(info, loaded.shape, sim, out_dir, [quiet](const std::string& file) {
      if (!quiet) std::fprintf(stderr, "wrote %s\n", file.c_str());
    });
  } else if (!args.has("--no-report")) {
    std::fprintf(stderr, "kvscope run: no step ran, so no report was written\n");
  }
  return report;
}

}  // namespace

int cmd_run(const Argv& argv) {
  Args args(argv,
            {"--out", "--steps", "--model", "--allocator", "--preemption", "--threads", "--variant",
             "--weight-format", "--backend", "--device-weights"},
            {"--help", "--bookkeeping", "--quiet", "--no-report", "--validate"});
  if (args.has("--help")) {
    std::fputs(with_backend_help(kHelp).c_str(), stdout);
    return 0;
  }
  if (args.positional().size() != 1)
    fail_expected("kvscope run", "one scenario file (see --help)",
                  std::to_string(args.positional().size()) + " arguments");
  const std::string path = args.positional()[0];
  const Scenario scenario = parse_scenario(path);
  const std::string variant = args.get("--variant", "base");
  scenario.variant(variant);  // an unknown name is an error before anything runs
  if (args.has("--validate")) return validate_only(scenario, path);
  const std::string out_dir = args.get("--out", "kvscope-out");
  const int max_steps = args.get_int("--steps", scenario.steps.value_or(100000));
  if (max_steps < 1) fail_expected("--steps", "a positive integer", std::to_string(max_steps));
  const bool quiet = args.has("--quiet");
  // The output directory first: a bad --out fails before the run, not after it.
  std::error_code dir_error;
  std::filesystem::create_directories(out_dir, dir_error);
  if (dir_error) throw Error(out_dir, "cannot create the output directory: " + dir_error.message());

  const ScenarioModelLoad loaded = load_scenario_model(
      scenario, args.get("--model", ""), args.has("--bookkeeping"),
      parse_weight_format(args.get("--weight-format", "native"), "--weight-format"));
  ResolvedRun resolved = resolve_scenario(scenario, variant, loaded.shape, loaded.tokenizer.get());
  attach_mla(resolved, loaded.weights, path);
  SimConfig config = resolved.config;
  apply_config_flags(args, config);
  config.tokenizer = loaded.tokenizer;  // recording.kvr carries the text of its token ids
  SimModel model{loaded.shape, loaded.weights};
  std::unique_ptr<Backend> backend;
  if (model.weights != nullptr) {
    backend = make_backend(args.get("--backend", "auto"), config.threads,
                           args.get("--device-weights", "f16"), RunNeeds{model.weights.get()});
    config.make_backend = [&backend] { return std::move(backend); };
  }
  std::unique_ptr<Simulator> sim;
  try {
    sim = std::make_unique<Simulator>(config, model, std::move(resolved.requests));
  } catch (const Error& e) {
    throw Error(path + ": " + e.where(), e.detail());
  }
  run_steps(*sim, max_steps, quiet);

  const Timeline& t = *sim->timeline();
  const std::string rec = out_dir + "/recording.kvr", trace = out_dir + "/trace.json",
                    csv = out_dir + "/metrics.csv";
  t.save(rec);
  t.export_chrome_trace(trace);
  write_metrics_csv(csv, t.all_metrics());
  const bool report =
      write_report_unless_empty(args, argv, scenario, path, variant, loaded, *sim, out_dir);

  const std::string where = variant == "base" ? path : path + " [" + variant + "]";
  // A bookkeeping run has no weights at all: "(bookkeeping only)" says so, not "random weights".
  print_summary(*sim, config, where, loaded.random_weights && model.weights != nullptr,
                model.weights == nullptr);
  std::printf("wrote %s, %s, %s%s\n", rec.c_str(), trace.c_str(), csv.c_str(),
              report ? " and the report (report.md)" : "");
  if (!sim->done()) {
    std::fprintf(stderr, "kvscope run: stopped after --steps %d with requests unfinished\n",
                 max_steps);
  }
  return 0;
}

}  // namespace kvscope::cli

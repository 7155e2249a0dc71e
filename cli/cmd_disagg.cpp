// kvscope disagg: a scenario run twice on one modelled clock, colocated (one instance) and
// disaggregated (a prefill and a decode instance joined by a link; engine/sched/disagg.h), with
// time-to-first-token split into queue, prefill, transfer and first decode, time per output
// token, the K/V that crossed the link and each pool's use; --json writes both runs' reports with
// every transfer's start and done events.
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <ostream>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "engine/analysis/memory_math.h"
#include "engine/common/atomic_write.h"
#include "engine/common/error.h"
#include "engine/scenario/scenario.h"
#include "engine/sched/disagg.h"
#include "nlohmann/json.hpp"

namespace kvscope::cli {
namespace {

constexpr const char* kHelp = R"(usage: kvscope disagg SCENARIO.json [options]

Runs the scenario's requests colocated (one instance) and disaggregated (a prefill instance and a
decode instance joined by a link), both on a modelled clock: each step priced by a GPU's roofline
(a lower bound: no launch or scheduler overheads), each transfer by the link's bandwidth plus its
latency. The scenario's cache.disaggregation section gives the defaults
(docs/concepts/disaggregation.md); the flags override it.

  --variant NAME                 the compare variant to run (default: base)
  --link NAME|BANDWIDTH          nvlink3, nvlink4, pcie5, rdma400, ib100, or e.g. 100GB/s, 400Gb/s
  --latency-us X                 added to every transfer (default 10)
  --transfer layer|request       layer: a block's layers leave as the prefill computes them
                                 (default); request: a request's blocks leave after its prefill
  --gpu h100|h200                whose roofline prices the steps (default h100)
  --prefill-blocks N             the prefill instance's pool (default: the scenario's num_blocks)
  --decode-blocks N              the decode instance's pool, and the colocated one's (default:
                                 the scenario's num_blocks)
  --interval-ms X                a request with arrival_step s arrives at s x X ms
  --decode-prefix-caching on|off whether the decode instance keeps a prefix cache of what it
                                 receives (its cached blocks do not cross the link; default: as
                                 the scenario's prefix_caching)
  --model PATH|NAME              override the scenario's model
  --bookkeeping                  no model compute: block accounting and the clock only
  --threads N                    CPU threads for the forward pass (default 1)
  --json FILE                    write both runs (requests, transfer events, instances) as JSON
  --quiet                        no progress on stderr
)";

nlohmann::json to_json(const DisaggReport& r) {
  nlohmann::json j;
  j["disaggregated"] = r.disaggregated;
  if (r.disaggregated) {
    j["link"] = {{"name", r.options.link.name},
                 {"bytes_per_second", r.options.link.bytes_per_second},
                 {"latency_seconds", r.options.latency_seconds},
                 {"transfer", transfer_mode_name(r.options.transfer)}};
  }
  j["gpu"] = {{"name", r.options.gpu.name},
              {"hbm_bytes_per_second", r.options.gpu.hbm_bytes_per_second},
              {"flops_per_second", r.options.gpu.flops_per_second}};
  j["block_bytes"] = r.block_bytes;
  j["transfer_bytes"] = r.transfer_bytes;
  j["transfer_blocks"] = r.transfer_blocks;
  if (r.disaggregated) {
    j["decode_prefix_caching"] = r.decode_prefix_caching;
    j["decode_cached_blocks"] = r.decode_cached_blocks;
  }
  j["makespan_seconds"] = r.makespan;
  for (const InstanceStats& s : r.instances) {
    j["instances"].push_back({{"name", s.name},
                              {"num_blocks", s.num_blocks},
                              {"steps", s.steps},
                              {"busy_seconds", s.busy_seconds},
                              {"peak_blocks_used", s.peak_blocks_used},
                              {"prefill_tokens", s.prefill_tokens},
                              {"decode_tokens", s.decode_tokens},
                              {"prefix_hit_tokens", s.prefix_hit_tokens}});
  }
  for (const RequestTiming& t : r.requests) {
    j["requests"].push_back({{"id", t.id},
                             {"prompt_tokens", t.prompt_tokens},
                             {"generated", t.generated},
                             {"arrival", t.arrival},
                             {"queue", t.queue()},
                             {"prefill", t.prefill()},
                             {"transfer", t.transfer()},
                             {"first_decode", t.first_decode()},
                             {"ttft", t.ttft()},
                             {"tpot", t.tpot()},
                             {"transfer_blocks", t.transfer_blocks},
                             {"transfer_bytes", t.transfer_bytes},
                             {"decode_cached_blocks", t.decode_cached_blocks}});
  }
  j["transfers"] = nlohmann::json::array();
  for (const TransferEvent& e : r.transfers) {
    j["transfers"].push_back({{"time", e.time},
                              {"event", e.done ? "transfer_done" : "transfer_start"},
                              {"request", e.request},
                              {"blocks", e.blocks},
                              {"bytes", e.bytes}});
  }
  return j;
}

void print_row(const char* name, double a, double b) {
  std::printf("  %-22s %14s %14s\n", name, format_ms(a).c_str(), format_ms(b).c_str());
}

}  // namespace

int cmd_disagg(const Argv& argv) {
  Args args(argv,
            {"--variant", "--link", "--latency-us", "--transfer", "--gpu", "--prefill-blocks",
             "--decode-blocks", "--interval-ms", "--decode-prefix-caching", "--model", "--threads",
             "--json"},
            {"--help", "--bookkeeping", "--quiet"});
  if (args.has("--help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (args.positional().size() != 1) {
    fail_expected("kvscope disagg", "one scenario file (see --help)",
                  std::to_string(args.positional().size()) + " arguments");
  }
  const std::string path = args.positional()[0];
  const Scenario scenario = parse_scenario(path);
  const std::string variant = args.get("--variant", "base");
  scenario.variant(variant);
  const std::string where = variant == "base" ? path : path + " [" + variant + "]";
  const ScenarioModelLoad loaded = load_scenario_model(
      scenario, args.get("--model", ""), args.has("--bookkeeping"), WeightFormat::kNative);
  ResolvedRun resolved = resolve_scenario(scenario, variant, loaded.shape, loaded.tokenizer.get());
  attach_mla(resolved, loaded.weights, path);
  if (!resolved.disaggregation) {
    fail_expected(where + ": cache.disaggregation",
                  "a disaggregation section (link, transfer, pools) in this variant",
                  "none (run a variant that has one, or add it)");
  }
  DisaggOptions o = *resolved.disaggregation;
  if (args.has("--link")) o.link = parse_link(args.get("--link"), "--link");
  if (args.has("--latency-us")) {
    const double us = args.get_double("--latency-us", 0);
    if (!(us >= 0) || !std::isfinite(us))
      fail_expected("--latency-us", "a finite time >= 0", args.get("--latency-us"));
    o.latency_seconds = us * 1e-6;
  }
  if (args.has("--transfer"))
    o.transfer = parse_transfer_mode(args.get("--transfer"), "--transfer");
  if (args.has("--gpu")) o.gpu = parse_gpu(args.get("--gpu"), "--gpu");
  if (args.has("--prefill-blocks")) {
    o.prefill_blocks = args.get_int("--prefill-blocks", 0);
    if (o.prefill_blocks < 1)
      fail_expected("--prefill-blocks", "a positive integer", args.get("--prefill-blocks"));
  }
  if (args.has("--decode-blocks")) {
    o.decode_blocks = args.get_int("--decode-blocks", 0);
    if (o.decode_blocks < 1)
      fail_expected("--decode-blocks", "a positive integer", args.get("--decode-blocks"));
  }
  if (args.has("--interval-ms")) {
    const double ms = args.get_double("--interval-ms", 0);
    if (!(ms >= 0) || !std::isfinite(ms))
      fail_expected("--interval-ms", "a finite time >= 0", args.get("--interval-ms"));
    o.arrival_interval_seconds = ms * 1e-3;
  }
  if (args.has("--decode-prefix-caching")) {
    const std::string v = args.get("--decode-prefix-caching");
    if (v != "on" && v != "off") fail_expected("--decode-prefix-caching", "on or off", v);
    o.decode_prefix_caching = v == "on";
  }
  SimConfig config = resolved.config;
  config.threads = args.get_int("--threads", 1);
  if (config.threads < 1) fail_expected("--threads", "a positive integer", args.get("--threads"));
  config.tokenizer = loaded.tokenizer;
  const SimModel model{loaded.shape, loaded.weights};

  std::unique_ptr<Progress> progress;
  if (!args.has("--quiet")) progress = std::make_unique<Progress>("disagg", 2, "steps");
  std::optional<Serving> shown;  // the run the progress line names
  long steps = 0;
  std::optional<DisaggComparison> both;
  try {
    both = run_both(config, o, model, resolved.requests, [&](Serving serving) {
      if (progress && shown != serving) {
        progress->step(serving == Serving::kColocated ? "colocated" : "disaggregated");
        shown = serving;
        steps = 0;
      }
      if (progress) progress->update(++steps, 0);
      return true;
    });
  } catch (const Error& e) {
    throw Error(where + ": " + e.where(), e.detail());
  }
  if (progress) progress->clear();
  const DisaggReport& co = both->colocated;
  const DisaggReport& di = both->disaggregated;

  const DisaggSummary a = summarize(co), b = summarize(di);
  if (model.weights == nullptr) {
    std::printf(
        "%s: %zu requests on %s's shape, bookkeeping only (no weights: the tokens are 0, "
        "no K/V bytes move)\n",
        where.c_str(), co.requests.size(), loaded.shape.describe().c_str());
  } else {
    std::printf("%s: %zu requests on %s\n", where.c_str(), co.requests.size(),
                loaded.source.c_str());
  }
  std::printf(
      "clock: each step at the %s roofline (%s); link %s, %.1f GB/s one way, %s latency, "
      "%s\n",
      o.gpu.name.c_str(), o.gpu.what.c_str(), o.link.name.c_str(), o.link.bytes_per_second / 1e9,
      kvscope::format_time(o.latency_seconds).c_str(),
      o.transfer == TransferMode::kLayerWise ? "layer by layer" : "whole requests");
  std::printf("  %-22s %14s %14s\n", "", "colocated", "disaggregated");
  print_row("TTFT mean", a.ttft_mean, b.ttft_mean);
  print_row("  queue", a.queue, b.queue);
  print_row("  prefill", a.prefill, b.prefill);
  print_row("  transfer", a.transfer, b.transfer);
  print_row("  first decode", a.first_decode, b.first_decode);
  print_row("TTFT p90", a.ttft_p90, b.ttft_p90);
  print_row("TPOT mean", a.tpot_mean, b.tpot_mean);
  print_row("TPOT p90", a.tpot_p90, b.tpot_p90);
  print_row("last token", co.makespan, di.makespan);
  if (di.decode_prefix_caching) {
    std::printf(
        "KV over the link: %s in %d blocks of %s (every prompt token but the last, whole blocks, "
        "less %d blocks the decode instance's prefix cache held: %s not sent)\n",
        format_bytes(static_cast<double>(di.transfer_bytes)).c_str(), di.transfer_blocks,
        format_bytes(di.block_bytes).c_str(), di.decode_cached_blocks,
        format_bytes(di.decode_cached_blocks * di.block_bytes).c_str());
  } else {
    std::printf(
        "KV over the link: %s in %d blocks of %s (every prompt token but the last, whole "
        "blocks)\n",
        format_bytes(static_cast<double>(di.transfer_bytes)).c_str(), di.transfer_blocks,
        format_bytes(di.block_bytes).c_str());
  }
  for (const DisaggReport* r : {&co, &di}) {
    for (const InstanceStats& s : r->instances) {
      std::printf(
          "  %-9s %d blocks, peak %d used; %d steps, busy %s; %lld prompt tokens computed, "
          "%lld decoded",
          s.name.c_str(), s.num_blocks, s.peak_blocks_used, s.steps,
          format_ms(s.busy_seconds).c_str(), static_cast<long long>(s.prefill_tokens),
          static_cast<long long>(s.decode_tokens));
      if (s.prefix_hit_tokens > 0)
        std::printf("; %lld from its prefix cache", static_cast<long long>(s.prefix_hit_tokens));
      std::printf("\n");
    }
  }
  if (a.finished != static_cast<int>(co.requests.size()) ||
      b.finished != static_cast<int>(di.requests.size())) {
    std::printf("refused (longer than the model's context): %zu colocated, %zu disaggregated\n",
                co.requests.size() - static_cast<std::size_t>(a.finished),
                di.requests.size() - static_cast<std::size_t>(b.finished));
  }
  if (args.has("--json")) {
    const std::string out = args.get("--json");
    nlohmann::json j;
    j["scenario"] = path;
    j["variant"] = variant;
    j["model"] = loaded.source;
    j["bookkeeping"] = model.weights == nullptr;
    j["colocated"] = to_json(co);
    j["disaggregated"] = to_json(di);
    write_file_atomically(out, [&](std::ostream& f) { f << j.dump(2) << "\n"; });
    std::printf("wrote %s\n", out.c_str());
  }
  return 0;
}

}  // namespace kvscope::cli

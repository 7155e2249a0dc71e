// kvscope eval evict, evict-sweep and streaming: eviction variants against the fp32 reference.
#include "cli/eval_evict.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <sstream>

#include "cli/eval_report.h"
#include "cli/eviction_flags.h"
#include "cli/format.h"
#include "cli/progress.h"
#include "engine/analysis/sweep_csv.h"
#include "engine/common/atomic_write.h"
#include "engine/common/error.h"
#include "engine/evict/attention_stats.h"
#include "engine/infer/step_runner.h"
#include "engine/kv/cache_manager.h"
#include "engine/report/png_plot.h"

namespace kvscope::cli {
namespace {

struct EvictResult {
  QualityReport report;
  EvictionRunStats stats;
};

EvictResult evaluate(const QualityEvaluator& evaluator, const EvictionRunOptions& o,
                     const EvictEvalSetup& setup) {
  EvictionVariant variant(o);
  EvalScope scope;
  scope.score_from = o.context;
  scope.bucket_size = setup.bucket_size;
  QualityReport report;
  {
    Progress progress("eval evict", 1, "positions");
    progress.step(variant.name());
    report = evaluator.evaluate(variant, progress.callback(), scope);
  }
  EvictResult r{std::move(report), variant.stats()};
  if (r.report.positions == 0) {
    fail_expected("--context", "fewer tokens than the windows hold (nothing left to score)",
                  std::to_string(o.context));
  }
  return r;
}

// Every run of a sweep in lockstep (QualityEvaluator::evaluate_all: one engine step per position
// for all of them, so the weights are read once per position, not once per run); all share
// options.front()'s context.
std::vector<std::pair<EvictionRunOptions, EvictResult>> evaluate_together(
    const char* job, const QualityEvaluator& evaluator,
    const std::vector<EvictionRunOptions>& options, const EvictEvalSetup& setup) {
  std::vector<std::unique_ptr<EvictionVariant>> variants;
  std::vector<CacheVariant*> all;
  for (const EvictionRunOptions& o : options) {
    variants.push_back(std::make_unique<EvictionVariant>(o));
    all.push_back(variants.back().get());
  }
  EvalScope scope;
  scope.score_from = options.front().context;
  scope.bucket_size = setup.bucket_size;
  std::vector<QualityReport> reports;
  {
    Progress progress(job, 1, "positions");
    progress.step(std::to_string(options.size()) + " eviction runs in lockstep");
    reports = evaluator.evaluate_all(all, progress.callback(), scope);
  }
  if (reports.front().positions == 0) {
    fail_expected("--context", "fewer tokens than the windows hold (nothing left to score)",
                  std::to_string(options.front().context));
  }
  std::vector<std::pair<EvictionRunOptions, EvictResult>> results;
  for (std::size_t i = 0; i < options.size(); ++i)
    results.emplace_back(options[i], EvictResult{std::move(reports[i]), variants[i]->stats()});
  return results;
}

// Bytes the full fp32 cache holds at its peak: the longest window's blocks.
double full_cache_bytes(const QualityReport& r, const EvictEvalSetup& setup, int block_size) {
  const int blocks = (setup.max_window + block_size - 1) / block_size;
  return r.reference_bytes_per_token * block_size * blocks;
}

nlohmann::json result_json(const EvictResult& e, const EvictionRunOptions& o) {
  nlohmann::json j = report_json(e.report);
  j["policy"] = eviction_kind_name(o.evictor.policy.kind);
  j["budget"] = o.evictor.policy.budget;
  j["sinks"] = o.evictor.policy.sinks;
  j["compaction"] = compaction_policy_name(o.evictor.compaction);
  j["positions_mode"] = position_mode_name(o.evictor.positions);
  j["context"] = o.context;
  j["peak_kv_bytes"] = e.stats.peak_kv_bytes;
  j["peak_blocks"] = e.stats.peak_blocks;
  j["peak_bytes_per_context_token"] = e.stats.peak_bytes_per_context_token();
  j["mean_attended_tokens"] = e.stats.mean_attended;
  j["tokens_evicted"] = e.stats.tokens_evicted;
  j["blocks_freed"] = e.stats.blocks_freed;
  j["slots_moved"] = e.stats.slots_moved;
  j["keys_rotated"] = e.stats.keys_rotated;
  j["buckets"] = buckets_json(e.report);
  return j;
}

std::vector<int> parse_budgets(const std::string& text) {
  return parse_int_list(text, "--budgets", 2, std::numeric_limits<int>::max(),
                        "comma-separated integers >= 2");
}

}  // namespace

EvictionRunOptions parse_eviction_options(const Args& args, const KvFormat& k, const KvFormat& v,
                                          int block_size) {
  EvictionRunOptions o;
  o.k_format = k;
  o.v_format = v;
  o.block_size = block_size;
  o.evictor = parse_eviction_flags(args, args.get("--policy", "window"), "--policy");
  o.context = args.get_int("--context", 0);
  if (o.context < 0) fail_expected("--context", "an integer >= 0", std::to_string(o.context));
  return o;
}

EvictRun prepare_evict_run(const Args& args) {
  check_eval_input_flags(args);
  const int block_size = eval_block_size(args);
  const KvFormatPair f = eval_kv_formats(args, "fp32");
  // The eviction flags before any model loads: a bad value fails now, not after the reference.
  EvictRun r{{}, parse_eviction_options(args, f.k, f.v, block_size), nullptr, {}};
  r.model = load_eval_model(args);
  validate_kv_formats(args, f, block_size, r.model.config());
  EvalText text = read_eval_text(args, r.model);
  const int bucket = args.get_int("--bucket", args.has("--long") ? 256 : 0);
  if (bucket < 0) fail_expected("--bucket", "an integer >= 0", std::to_string(bucket));
  r.setup = {text.source, text.max_window, bucket, r.model.config().seq_len, args.has("--json")};
  r.evaluator = run_reference(r.model, text, block_size);
  return r;
}

int run_evict_eval(const QualityEvaluator& evaluator, const EvictionRunOptions& options,
                   const EvictEvalSetup& setup) {
  const EvictResult e = evaluate(evaluator, options, setup);
  const QualityReport& r = e.report;
  if (setup.json) {
    nlohmann::json j = result_json(e, options);
    j["source"] = setup.source;
    j["block_size"] = options.block_size;
    j["full_cache_peak_bytes"] = full_cache_bytes(r, setup, options.block_size);
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("eval: %s, %d windows (longest %d tokens), %ld scored positions, block %d\n",
              setup.source.c_str(), r.windows, setup.max_window, r.positions, options.block_size);
  if (setup.max_window > setup.seq_len) {
    std::printf(
        "  note: positions >= %d are past the model's trained context; the reference there "
        "is the full fp32 cache (dense attention), itself out of distribution\n",
        setup.seq_len);
  }
  std::printf("  variant              %s (%s K/V, %s)\n", r.variant.c_str(),
              options.k_format == options.v_format ? options.k_format.name().c_str() : "mixed",
              options.context > 0 ? ("compress after " + std::to_string(options.context) +
                                     " prompt tokens, then continue; scored after the prompt")
                                        .c_str()
                                  : "streaming: evict after every token");
  std::printf("  perplexity           %.4f (full cache %.4f, delta %+.4f)\n", r.ppl_variant,
              r.ppl_reference, r.ppl_variant - r.ppl_reference);
  std::printf("  KL(full || evicted)  mean %.3e, max %.3e nats\n", r.kl_mean, r.kl_max);
  std::printf("  top-1 agreement      %.2f%%\n", 100.0 * r.top1_agreement);
  std::printf("  peak KV bytes        %zu (%d blocks; full cache %.0f)\n", e.stats.peak_kv_bytes,
              e.stats.peak_blocks, full_cache_bytes(r, setup, options.block_size));
  std::printf(
      "  KV bytes per token   %.2f of context (each window's peak / its tokens; fp32 %.0f)\n",
      e.stats.peak_bytes_per_context_token(), r.reference_bytes_per_token);
  std::printf("  attended per query   %.1f tokens on average\n", e.stats.mean_attended);
  std::printf("  evicted %ld tokens, freed %ld blocks, moved %ld slots, re-rotated %ld keys\n",
              e.stats.tokens_evicted, e.stats.blocks_freed, e.stats.slots_moved,
              e.stats.keys_rotated);
  if (!r.buckets.empty()) {
    std::printf("  | positions | scored | ppl full | ppl evicted | mean KL | top-1 |\n");
    std::printf("  |---|---:|---:|---:|---:|---:|\n");
    for (const BucketQuality& b : r.buckets) {
      std::printf("  | %d-%d | %ld | %.4f | %.4f | %.3e | %.2f%% |\n", b.first,
                  b.first + setup.bucket_size - 1, b.positions, b.ppl_reference, b.ppl_variant,
                  b.kl_mean, 100.0 * b.top1_agreement);
    }
  }
  return 0;
}

namespace {

// The series of `spec` named `label` (points with markers), added when it is not there yet.
PlotSeries& series_labelled(PlotSpec& spec, const std::string& label) {
  for (PlotSeries& s : spec.series)
    if (s.label == label) return s;
  PlotSeries s;
  s.label = label;
  s.markers = true;
  spec.series.push_back(s);
  return spec.series.back();
}

// The sweep CSV (engine/analysis/sweep_csv.h, eviction schema): one row per run.
void write_evict_csv(const std::string& path,
                     const std::vector<std::pair<EvictionRunOptions, EvictResult>>& results,
                     double full_bytes) {
  write_file_atomically(path, [&](std::ostream& os) {
    using namespace sweep_csv;
    SweepCsvWriter csv(os, SweepCsvKind::kEviction);
    for (const auto& [o, e] : results) {
      csv.text(kPolicy, eviction_kind_name(o.evictor.policy.kind))
          .integer(kBudget, o.evictor.policy.budget)
          .integer(kSinks, o.evictor.policy.sinks)
          .text(kCompaction, compaction_policy_name(o.evictor.compaction))
          .text(kPositions, position_mode_name(o.evictor.positions))
          .integer(kContext, o.context);
      write_quality_cells(csv, e.report);
      csv.integer(kPeakKvBytes, static_cast<long long>(e.stats.peak_kv_bytes))
          .number(kFullCachePeakBytes, full_bytes)
          .number(kMeanAttended, e.stats.mean_attended)
          .integer(kTokensEvicted, e.stats.tokens_evicted)
          .integer(kBlocksFreed, e.stats.blocks_freed)
          .integer(kSlotsMoved, e.stats.slots_moved)
          .number(kPeakBytesPerContextToken, e.stats.peak_bytes_per_context_token());
      csv.end_row();
    }
  });
}

// Perplexity over the buckets of `r` that lie wholly inside [lo, hi) positions (its per-position
// NLL averaged: each bucket's log perplexity weighted by its positions); NaN when none does.
double ppl_over(const QualityReport& r, int bucket_size, int lo, int hi, bool reference) {
  double nll = 0.0;
  long n = 0;
  for (const BucketQuality& b : r.buckets) {
    if (b.first < lo || b.first + bucket_size > hi) continue;
    nll += static_cast<double>(b.positions) * std::log(reference ? b.ppl_reference : b.ppl_variant);
    n += b.positions;
  }
  return n > 0 ? std::exp(nll / static_cast<double>(n)) : std::numeric_limits<double>::quiet_NaN();
}

std::string streaming_label(const EvictionRunOptions& o) {
  return "cache " + std::to_string(o.evictor.policy.budget) + ", " +
         (o.evictor.policy.sinks == 0 ? std::string("window")
                                      : std::to_string(o.evictor.policy.sinks) +
                                            (o.evictor.policy.sinks == 1 ? " sink" : " sinks")) +
         (o.evictor.positions == PositionMode::kShift ? ", positions in cache"
                                                      : ", original positions");
}

// The streaming runs per bucket of positions (with --long): streaming_positions.csv, and
// streaming_positions.png (dense, window and 4 sinks in both position modes; the trained
// context marked).
void write_streaming_positions(
    const std::vector<std::pair<EvictionRunOptions, EvictResult>>& results,
    const EvictEvalSetup& setup, const std::string& out_dir) {
  const QualityReport& ref = results.front().second.report;
  if (ref.buckets.empty() || setup.bucket_size <= 0) return;
  write_file_atomically(out_dir + "/streaming_positions.csv", [&](std::ostream& os) {
    os << "budget,positions,sinks,bucket_first,bucket_last,scored,ppl_dense,ppl,kl_mean,"
          "top1_agreement\n";
    for (const auto& [o, e] : results) {
      for (const BucketQuality& b : e.report.buckets) {
        os << o.evictor.policy.budget << ',' << position_mode_name(o.evictor.positions) << ','
           << o.evictor.policy.sinks << ',' << b.first << ',' << b.first + setup.bucket_size - 1
           << ',' << b.positions << ',' << b.ppl_reference << ',' << b.ppl_variant << ','
           << b.kl_mean << ',' << b.top1_agreement << '\n';
      }
    }
  });
  PlotSpec plot;
  plot.title = "StreamingLLM: perplexity along the text";
  plot.x_label = "position (bucket of " + std::to_string(setup.bucket_size) + " tokens)";
  plot.y_label = "perplexity per bucket (log)";
  plot.log_y = true;
  plot.footnote = "kvscope eval streaming; " +
                  std::filesystem::path(setup.source).filename().string() + ", " +
                  std::to_string(setup.max_window) + "-token window";
  if (setup.max_window > setup.seq_len) {
    plot.v_lines.emplace_back(setup.seq_len, "trained context " + std::to_string(setup.seq_len));
  }
  const auto mid = [&](const BucketQuality& b) {  // the bucket's middle position
    return b.first + (setup.bucket_size - 1) / 2.0;
  };
  PlotSeries& dense = series_labelled(plot, "dense attention (full cache)");
  for (const BucketQuality& b : ref.buckets) {
    dense.x.push_back(mid(b));
    dense.y.push_back(b.ppl_reference);
  }
  for (const auto& [o, e] : results) {
    if (o.evictor.policy.sinks != 0 && o.evictor.policy.sinks != 4) continue;
    PlotSeries& s = series_labelled(plot, streaming_label(o));
    for (const BucketQuality& b : e.report.buckets) {
      s.x.push_back(mid(b));
      s.y.push_back(b.ppl_variant);
    }
  }
  write_png_plot(plot, out_dir + "/streaming_positions.png");
}

// Past the trained context: each run's perplexity inside it and past it (from the buckets).
void print_past_context(const std::vector<std::pair<EvictionRunOptions, EvictResult>>& results,
                        const EvictEvalSetup& setup) {
  const QualityReport& ref = results.front().second.report;
  if (ref.buckets.empty() || setup.bucket_size <= 0 || setup.max_window <= setup.seq_len) return;
  const int end = std::numeric_limits<int>::max();
  std::printf("\nperplexity inside the trained context (positions < %d) and past it:\n",
              setup.seq_len);
  std::printf("| run | inside | past |\n|---|---:|---:|\n");
  std::printf("| dense attention | %.2f | %.2f |\n",
              ppl_over(ref, setup.bucket_size, 0, setup.seq_len, true),
              ppl_over(ref, setup.bucket_size, setup.seq_len, end, true));
  for (const auto& [o, e] : results) {
    std::printf("| %s | %.2f | %.2f |\n", streaming_label(o).c_str(),
                ppl_over(e.report, setup.bucket_size, 0, setup.seq_len, false),
                ppl_over(e.report, setup.bucket_size, setup.seq_len, end, false));
  }
}

}  // namespace

int run_evict_sweep(const QualityEvaluator& evaluator, const EvictionRunOptions& base,
                    const std::string& budgets_text, const EvictEvalSetup& setup,
                    const std::string& out_dir) {
  const std::vector<int> budgets = parse_budgets(budgets_text);
  const std::vector<EvictionKind> policies = {EvictionKind::kWindow, EvictionKind::kSinksWindow,
                                              EvictionKind::kH2O,    EvictionKind::kSnapKV,
                                              EvictionKind::kTova,   EvictionKind::kRandom};
  std::vector<EvictionRunOptions> runs;
  for (EvictionKind kind : policies) {
    for (int budget : budgets) {
      EvictionRunOptions o = base;
      o.evictor.policy.kind = kind;
      o.evictor.policy.budget = budget;
      if (kind == EvictionKind::kSinksWindow && o.evictor.policy.sinks >= budget - 1) continue;
      runs.push_back(o);
    }
  }
  const auto results = evaluate_together("eval evict-sweep", evaluator, runs, setup);
  checked_out_dir(out_dir);
  const double full_bytes = full_cache_bytes(results.front().second.report, setup, base.block_size);
  write_evict_csv(out_dir + "/evict_sweep.csv", results, full_bytes);
  std::string command = "kvscope eval evict-sweep";
  if (base.context > 0) command += " --context " + std::to_string(base.context);
  command += "; windows up to " + std::to_string(setup.max_window) + " tokens";
  PlotSpec kl;
  kl.title = "Eviction: KL(full || evicted) vs budget";
  kl.x_label = "budget (tokens per query; log)";
  kl.y_label = "mean KL divergence (nats, log)";
  kl.log_x = kl.log_y = true;
  kl.footnote = command;
  PlotSpec ppl = kl;
  ppl.title = "Eviction: perplexity vs budget";
  ppl.y_label = "perplexity (full cache: dashed line)";
  ppl.log_y = false;
  char ref_label[64];
  std::snprintf(ref_label, sizeof ref_label, "full cache %.3f",
                results.front().second.report.ppl_reference);
  ppl.h_lines.emplace_back(results.front().second.report.ppl_reference, ref_label);
  for (const auto& [o, e] : results) {
    const std::string label = eviction_kind_name(o.evictor.policy.kind);
    for (PlotSpec* spec : {&kl, &ppl}) {
      PlotSeries& series = series_labelled(*spec, label);
      series.x.push_back(o.evictor.policy.budget);
      series.y.push_back(spec == &kl ? std::max(e.report.kl_mean, 1e-9) : e.report.ppl_variant);
    }
  }
  write_png_plot(kl, out_dir + "/evict_kl.png");
  write_png_plot(ppl, out_dir + "/evict_ppl.png");
  if (setup.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& [o, e] : results) j.push_back(result_json(e, o));
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  const QualityReport& ref = results.front().second.report;
  std::printf("source: %s; %d windows (longest %d), %ld scored positions, block %d, %s\n",
              setup.source.c_str(), ref.windows, setup.max_window, ref.positions, base.block_size,
              base.context > 0
                  ? ("compress after " + std::to_string(base.context) + " tokens").c_str()
                  : "streaming");
  std::printf("full fp32 cache: perplexity %.4f, peak %.0f KV bytes\n", ref.ppl_reference,
              full_bytes);
  std::printf(
      "| policy | budget | perplexity | delta | mean KL | top-1 agree | peak KV bytes | "
      "vs full | blocks freed | slots moved |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& [o, e] : results) {
    const QualityReport& r = e.report;
    std::printf("| %s | %d | %.4f | %+.4f | %.3e | %.2f%% | %zu | %.3f | %ld | %ld |\n",
                eviction_kind_name(o.evictor.policy.kind).c_str(), o.evictor.policy.budget,
                r.ppl_variant, r.ppl_variant - r.ppl_reference, r.kl_mean, 100.0 * r.top1_agreement,
                e.stats.peak_kv_bytes, static_cast<double>(e.stats.peak_kv_bytes) / full_bytes,
                e.stats.blocks_freed, e.stats.slots_moved);
  }
  std::printf("wrote %s/evict_sweep.csv, evict_kl.png, evict_ppl.png\n", out_dir.c_str());
  return 0;
}

int run_streaming_sweep(const QualityEvaluator& evaluator, const EvictionRunOptions& base,
                        const std::string& budgets_text, const EvictEvalSetup& setup,
                        const std::string& out_dir) {
  const std::vector<int> budgets = parse_budgets(budgets_text);
  const int sink_counts[] = {0, 1, 2, 4, 8};  // StreamingLLM's Table 2 columns
  const PositionMode modes[] = {PositionMode::kShift, PositionMode::kKeep};
  std::vector<EvictionRunOptions> runs;
  for (int budget : budgets) {
    for (PositionMode mode : modes) {
      for (int sinks : sink_counts) {
        if (sinks >= budget - 1) continue;
        EvictionRunOptions o = base;
        o.evictor.policy.kind = sinks == 0 ? EvictionKind::kWindow : EvictionKind::kSinksWindow;
        o.evictor.policy.budget = budget;
        o.evictor.policy.sinks = sinks;
        o.evictor.positions = mode;
        runs.push_back(o);
      }
    }
  }
  const auto results = evaluate_together("eval streaming", evaluator, runs, setup);
  checked_out_dir(out_dir);
  const QualityReport& ref = results.front().second.report;
  write_evict_csv(out_dir + "/streaming.csv", results,
                  full_cache_bytes(ref, setup, base.block_size));
  PlotSpec ppl;
  ppl.title = "StreamingLLM: perplexity vs sink tokens kept";
  ppl.x_label = "sink tokens kept (0 = window attention)";
  ppl.y_label = "perplexity (log; dense attention: dashed)";
  ppl.log_y = true;
  ppl.footnote = "kvscope eval streaming; windows up to " + std::to_string(setup.max_window) +
                 " tokens; " + std::filesystem::path(setup.source).filename().string();
  char ref_label[64];
  std::snprintf(ref_label, sizeof ref_label, "dense %.2f", ref.ppl_reference);
  ppl.h_lines.emplace_back(ref.ppl_reference, ref_label);
  for (const auto& [o, e] : results) {
    const std::string label =
        "cache " + std::to_string(o.evictor.policy.budget) +
        (o.evictor.positions == PositionMode::kShift ? ", positions in cache"
                                                     : ", original positions");
    PlotSeries& series = series_labelled(ppl, label);
    series.x.push_back(o.evictor.policy.sinks);
    series.y.push_back(e.report.ppl_variant);
  }
  write_png_plot(ppl, out_dir + "/streaming_ppl.png");
  write_streaming_positions(results, setup, out_dir);
  if (setup.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& [o, e] : results) j.push_back(result_json(e, o));
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("source: %s; %d windows (longest %d), %ld scored positions, block %d\n",
              setup.source.c_str(), ref.windows, setup.max_window, ref.positions, base.block_size);
  std::printf("dense attention (full fp32 cache): perplexity %.4f\n", ref.ppl_reference);
  std::printf("| cache | positions | 0 sinks (window) | 1 | 2 | 4 | 8 |\n");
  std::printf("|---:|---|---:|---:|---:|---:|---:|\n");
  for (std::size_t i = 0; i < results.size();) {
    const EvictionRunOptions& o = results[i].first;
    std::printf(
        "| %d | %s |", o.evictor.policy.budget,
        o.evictor.positions == PositionMode::kShift ? "in cache (StreamingLLM)" : "original");
    std::size_t j = i;
    for (;
         j < results.size() && results[j].first.evictor.policy.budget == o.evictor.policy.budget &&
         results[j].first.evictor.positions == o.evictor.positions;
         ++j) {
      std::printf(" %.2f |", results[j].second.report.ppl_variant);
    }
    std::printf("\n");
    i = j;
  }
  print_past_context(results, setup);
  std::printf("wrote %s/streaming.csv, streaming_ppl.png%s\n", out_dir.c_str(),
              ref.buckets.empty() ? "" : ", streaming_positions.csv, streaming_positions.png");
  return 0;
}

}  // namespace kvscope::cli

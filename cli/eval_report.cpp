// kvscope eval format's report of one variant, and eval format-sweep: every KV format against
// fp32 on the same windows, as a table, a CSV and two Pareto plots (quality loss against exact
// bytes per token).
#include "cli/eval_report.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "cli/format.h"
#include "cli/progress.h"
#include "engine/analysis/sweep_csv.h"
#include "engine/backend/cpu/quant_matmul.h"
#include "engine/common/atomic_write.h"
#include "engine/common/error.h"
#include "engine/quant/kv_format_registry.h"
#include "engine/report/png_plot.h"

namespace kvscope::cli {

std::vector<QualityReport> evaluate_format_sweep(const QualityEvaluator& evaluator,
                                                 int block_size) {
  std::vector<QualityReport> reports;
  const auto& sweep = quant::kv_format_sweep();
  Progress progress("eval format-sweep", static_cast<int>(sweep.size()), "positions");
  for (const quant::KvLadderEntry& e : sweep) {
    auto variant = make_kv_format_variant(parse_kv_format(e.k, "sweep"),
                                          parse_kv_format(e.v, "sweep"), block_size);
    progress.step(variant->name());
    reports.push_back(evaluator.evaluate(*variant, progress.callback()));
  }
  return reports;
}

nlohmann::json report_json(const QualityReport& r) {
  return {{"variant", r.variant},
          {"windows", r.windows},
          {"positions", r.positions},
          {"ppl_reference", r.ppl_reference},
          {"ppl_variant", r.ppl_variant},
          {"ppl_delta", r.ppl_variant - r.ppl_reference},
          {"kl_mean", r.kl_mean},
          {"kl_max", r.kl_max},
          {"top1_agreement", r.top1_agreement},
          {"bytes_per_token", r.footprint.bytes_per_token},
          {"bytes_per_sequence", r.footprint.bytes_per_sequence},
          {"effective_bytes_per_token", r.effective_bytes_per_token},
          {"reference_bytes_per_token", r.reference_bytes_per_token},
          {"mean_window_tokens", r.mean_window_tokens}};
}

nlohmann::json buckets_json(const QualityReport& r) {
  nlohmann::json buckets = nlohmann::json::array();
  for (const BucketQuality& b : r.buckets) {
    buckets.push_back({{"first", b.first},
                       {"positions", b.positions},
                       {"ppl_reference", b.ppl_reference},
                       {"ppl_variant", b.ppl_variant},
                       {"kl_mean", b.kl_mean},
                       {"top1_agreement", b.top1_agreement}});
  }
  return buckets;
}

namespace {

double mean_energy_kept(const MlaCodec& codec) {
  double e = 0.0;
  for (double x : codec.energy_kept) e += x / static_cast<double>(codec.energy_kept.size());
  return e;
}

void print_one_variant(const QualityReport& r, const Model& model, const std::string& source,
                       int block_size, const MlaCodec* codec) {
  std::printf("eval: %s, %d windows, %ld scored positions, block %d\n", source.c_str(), r.windows,
              r.positions, block_size);
  std::printf("  variant              %s\n", r.variant.c_str());
  // Native quantized matmuls round their input activations to 8 bits: a cache change as small
  // as fp16's flips some of those roundings, which puts a floor under KL (about 3e-3 nats on
  // SmolLM2 against fp16's own 3e-7 with f32 weights; docs/concepts/mla.md, "A note on native
  // quantized weights").
  if (model.native() != nullptr) {
    std::printf(
        "  weights              %s: 8-bit activations put a floor under KL; "
        "--weight-format f32 measures the cache alone\n",
        cpu::describe_weight_format(model).c_str());
  }
  if (codec != nullptr) {
    const bool absorbed = codec->options.mode == MlaMode::kAbsorbed;
    std::printf(
        "  MLA                  rank %d of %d, %.2f%% of ||[W_k%s; W_v]||^2 kept (mean over "
        "layers)%s\n",
        codec->rank(), codec->full_rank, 100.0 * mean_energy_kept(*codec), absorbed ? "_nope" : "",
        absorbed ? "; non-RoPE dims lose rotation, no fine-tuning" : "");
  }
  std::printf("  perplexity           %.4f (fp32 %.4f, delta %+.4f)\n", r.ppl_variant,
              r.ppl_reference, r.ppl_variant - r.ppl_reference);
  std::printf("  KL(fp32 || variant)  mean %.3e, max %.3e nats\n", r.kl_mean, r.kl_max);
  std::printf("  top-1 agreement      %.2f%%\n", 100.0 * r.top1_agreement);
  std::printf(
      "  bytes per token      %.2f in blocks + %.0f per sequence = %.2f at %.0f tokens (fp32 "
      "%.0f)\n",
      r.footprint.bytes_per_token, r.footprint.bytes_per_sequence, r.effective_bytes_per_token,
      r.mean_window_tokens, r.reference_bytes_per_token);
}

}  // namespace

int report_one_variant(const QualityEvaluator& evaluator, CacheVariant& variant, const Model& model,
                       const std::string& source, int block_size, const MlaCodec* codec,
                       bool json) {
  QualityReport r;
  {
    Progress progress("eval", 1, "positions");
    progress.step(variant.name());
    r = evaluator.evaluate(variant, progress.callback());
  }
  if (!json) {
    print_one_variant(r, model, source, block_size, codec);
    return 0;
  }
  nlohmann::json j = report_json(r);
  j["source"] = source;
  j["block_size"] = block_size;
  j["weights"] = cpu::describe_weight_format(model);
  if (codec != nullptr) {
    j["mla_rank"] = codec->rank();
    j["mla_full_rank"] = codec->full_rank;
    j["mla_energy_kept_mean"] = mean_energy_kept(*codec);
  }
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

namespace {

// quant_pareto_kl.png and quant_pareto_ppl.png: each format's KL and perplexity change against
// its compression, one series per ladder family.
void write_pareto_plots(const std::vector<QualityReport>& reports, const std::string& command,
                        const std::string& out_dir) {
  PlotSpec kl;
  kl.title = "KV formats: KL(fp32 || format) vs compression";
  kl.x_label = "compression vs fp32 (bytes/token incl. scales and KIVI staging)";
  kl.y_label = "mean KL divergence (nats)";
  kl.log_y = true;
  kl.log_x = false;
  char fp32_note[64];
  std::snprintf(fp32_note, sizeof fp32_note, "; fp32 = %.0f bytes/token, KL 0",
                reports.front().effective_bytes_per_token);
  kl.footnote = command + fp32_note;
  PlotSpec ppl = kl;
  ppl.title = "KV formats: perplexity change vs compression";
  ppl.log_y = true;
  ppl.y_label = "perplexity - fp32 perplexity (log; <= 0 not drawn)";
  ppl.footnote = command;
  // One series per ladder family so colours stay distinct, labelled with the family's rungs
  // ("KIVI: kivi4, kivi2, kivi2-r64"); the CSV and table name every point. fp32 is the x = 1
  // reference, not a point.
  const std::vector<quant::KvLadderEntry>& ladder = quant::kv_format_sweep();
  std::vector<std::string> families;  // in ladder order
  std::vector<std::string> labels;
  for (const quant::KvLadderEntry& e : ladder) {
    if (&e == &ladder.front()) continue;
    const auto at = std::find(families.begin(), families.end(), e.family);
    if (at == families.end()) {
      families.push_back(e.family);
      labels.push_back(e.family + ": " + e.display_name());
    } else {
      std::string& label = labels[static_cast<std::size_t>(at - families.begin())];
      label.append(", ").append(e.display_name());
    }
  }
  for (std::size_t i = 0; i < families.size(); ++i) {
    PlotSeries s;
    s.label = labels[i];
    s.line = false;
    s.markers = true;
    kl.series.push_back(s);
    ppl.series.push_back(s);
  }
  for (std::size_t i = 1; i < reports.size(); ++i) {
    const QualityReport& r = reports[i];
    const auto family = static_cast<std::size_t>(
        std::find(families.begin(), families.end(), ladder[i].family) - families.begin());
    const double x = r.reference_bytes_per_token / r.effective_bytes_per_token;
    kl.series[family].x.push_back(x);
    kl.series[family].y.push_back(r.kl_mean);
    ppl.series[family].x.push_back(x);
    ppl.series[family].y.push_back(r.ppl_variant - r.ppl_reference);
  }
  write_png_plot(kl, out_dir + "/quant_pareto_kl.png");
  write_png_plot(ppl, out_dir + "/quant_pareto_ppl.png");
}

}  // namespace

int run_sweep(const QualityEvaluator& evaluator, const ModelConfig& c, int block_size,
              const std::string& source, const std::string& out_dir, bool json) {
  (void)c;
  const std::vector<QualityReport> reports = evaluate_format_sweep(evaluator, block_size);

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw Error(out_dir, "cannot create the --out directory: " + ec.message());
  const std::string command = "kvscope eval format-sweep --block-size " +
                              std::to_string(block_size) + " (" +
                              std::filesystem::path(source).filename().string() + ")";
  write_file_atomically(out_dir + "/quant_sweep.csv", [&](std::ostream& os) {
    SweepCsvWriter csv(os, SweepCsvKind::kFormats);
    for (const QualityReport& r : reports) {
      write_bytes_cells(csv, r);
      write_quality_cells(csv, r);
      csv.end_row();
    }
  });
  write_pareto_plots(reports, command, out_dir);

  if (json) {
    nlohmann::json j = nlohmann::json::array();
    for (const QualityReport& r : reports) j.push_back(report_json(r));
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  const QualityReport& ref = reports.front();
  std::printf("source: %s; %d windows, %ld scored positions, block %d, mean window %.1f tokens\n",
              source.c_str(), ref.windows, ref.positions, block_size, ref.mean_window_tokens);
  std::printf(
      "| format | bytes/token (blocks) | + per sequence | effective bytes/token | vs fp32 | "
      "perplexity | delta | mean KL | max KL | top-1 agree |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const QualityReport& r : reports) {
    std::printf("| %s | %.2f | %.0f | %.2f | %.3fx | %.4f | %+.4f | %.2e | %.2e | %.2f%% |\n",
                r.variant.c_str(), r.footprint.bytes_per_token, r.footprint.bytes_per_sequence,
                r.effective_bytes_per_token,
                r.reference_bytes_per_token / r.effective_bytes_per_token, r.ppl_variant,
                r.ppl_variant - r.ppl_reference, r.kl_mean, r.kl_max, 100.0 * r.top1_agreement);
  }
  std::printf("wrote %s/quant_sweep.csv, quant_pareto_kl.png, quant_pareto_ppl.png\n",
              out_dir.c_str());
  return 0;
}

}  // namespace kvscope::cli

// kvscope eval --sweep: every KV format against fp32 on the same windows, as a table, a CSV and
// two Pareto plots (quality loss against exact bytes per token).
#include "cli/eval_report.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <vector>

#include "engine/common/atomic_write.h"
#include "engine/common/error.h"
#include "engine/report/png_plot.h"

namespace kvscope::cli {
namespace {

struct SweepEntry {
  const char* k;
  const char* v;
};
// Reference first, then roughly by bytes per token.
constexpr SweepEntry kSweep[] = {
    {"fp32", "fp32"},         {"fp16", "fp16"},         {"bf16", "bf16"},
    {"fp8-e4m3", "fp8-e4m3"}, {"fp8-e5m2", "fp8-e5m2"}, {"int8", "int8"},
    {"int8", "int4"},         {"int4", "int4"},         {"int4-g8", "int4-g8"},
    {"kivi4", "kivi4"},       {"kivi2", "kivi2"},       {"kivi2-r64", "kivi2-r64"},
    {"int2", "int2"},         {"int2-g8", "int2-g8"},
};

}  // namespace

void progress_line(const std::string& name, long done, long total) {
  if (isatty(2) == 0 || total <= 0 || (done % 64 != 0 && done != total)) return;
  std::fprintf(stderr, "\r%-26s %3ld%%", name.c_str(), total > 0 ? 100 * done / total : 0);
}

std::vector<QualityReport> evaluate_format_sweep(const QualityEvaluator& evaluator,
                                                 int block_size) {
  std::vector<QualityReport> reports;
  for (const SweepEntry& e : kSweep) {
    auto variant = make_kv_format_variant(parse_kv_format(e.k, "sweep"),
                                          parse_kv_format(e.v, "sweep"), block_size);
    const std::string name = variant->name();
    reports.push_back(
        evaluator.evaluate(*variant, [&](long d, long t) { progress_line(name, d, t); }));
  }
  if (isatty(2) != 0) std::fputs("\r\033[K", stderr);
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

int run_sweep(const QualityEvaluator& evaluator, const ModelConfig& c, int block_size,
              const std::string& source, const std::string& out_dir, bool json) {
  (void)c;
  const std::vector<QualityReport> reports = evaluate_format_sweep(evaluator, block_size);

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw Error(out_dir, "cannot create the --out directory: " + ec.message());
  const std::string command = "kvscope eval --sweep --block-size " + std::to_string(block_size) +
                              " (" + std::filesystem::path(source).filename().string() + ")";
  write_file_atomically(out_dir + "/quant_sweep.csv", [&](std::ostream& os) {
    os << "variant,bytes_per_token,bytes_per_sequence,effective_bytes_per_token,ppl_reference,"
          "ppl_variant,ppl_delta,kl_mean,kl_max,top1_agreement\n";
    os << std::setprecision(8);
    for (const QualityReport& r : reports) {
      os << '"' << r.variant << "\"," << r.footprint.bytes_per_token << ','
         << r.footprint.bytes_per_sequence << ',' << r.effective_bytes_per_token << ','
         << r.ppl_reference << ',' << r.ppl_variant << ',' << r.ppl_variant - r.ppl_reference << ','
         << r.kl_mean << ',' << r.kl_max << ',' << r.top1_agreement << '\n';
    }
  });
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
  // One series per family so colours stay distinct; the CSV and table name every point.
  auto family = [](const std::string& v) -> std::string {
    if (v.rfind("fp", 0) == 0 || v == "bf16") return "float: fp16, bf16, fp8 e4m3/e5m2";
    if (v.rfind("kivi", 0) == 0) return "KIVI: kivi4, kivi2, kivi2-r64";
    if (v.rfind("K ", 0) == 0) return "K int8 + V int4";
    if (v.rfind("int2", 0) == 0) return "int2 per token (g32, g8)";
    return "int8 / int4 per token (g32, g8)";
  };
  for (const QualityReport& r : reports) {
    if (r.variant == "fp32") continue;
    const std::string f = family(r.variant);
    auto add = [&](PlotSpec& spec, double y) {
      auto it = std::find_if(spec.series.begin(), spec.series.end(),
                             [&](const PlotSeries& s) { return s.label == f; });
      if (it == spec.series.end()) {
        PlotSeries s;
        s.label = f;
        s.line = false;
        s.markers = true;
        spec.series.push_back(s);
        it = spec.series.end() - 1;
      }
      it->x.push_back(r.reference_bytes_per_token / r.effective_bytes_per_token);
      it->y.push_back(y);
    };
    add(kl, r.kl_mean);
    add(ppl, r.ppl_variant - r.ppl_reference);
  }
  write_png_plot(kl, out_dir + "/quant_pareto_kl.png");
  write_png_plot(ppl, out_dir + "/quant_pareto_ppl.png");

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

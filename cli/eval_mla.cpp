// kvscope eval mla-sweep: the model converted to MLA at many ranks (mode A, mode B with a few
// RoPE choices), measured against the fp32 cache, with every KV format on the same plots.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/args.h"
#include "cli/eval_report.h"
#include "cli/format.h"
#include "cli/progress.h"
#include "engine/analysis/sweep_csv.h"
#include "engine/common/atomic_write.h"
#include "engine/common/error.h"
#include "engine/mla/mla_codec.h"
#include "engine/report/png_plot.h"

namespace kvscope::cli {
namespace {

struct MlaRow {
  std::string series;  // plot series
  MlaOptions options;
  KvFormat format;
  double energy_mean = 1.0, energy_min = 1.0;  // of [W_k_nope; W_v] kept, over layers
  QualityReport report;
};

double mean(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

// One plot series of the sweep: a conversion mode, its RoPE choice and the latents' format.
struct MlaSeries {
  std::string label;
  MlaMode mode;
  int rope_dims;
  RopeSelect select;
  const char* format;
};

MlaSeries series_a(const char* format) {
  return {std::string("MLA-A ") + format + " latents", MlaMode::kReconstruct, 0,
          RopeSelect::kHighFrequency, format};
}

MlaSeries series_b(int rope_dims, RopeSelect select, int head_dim) {
  return {"MLA-B rope " + std::to_string(rope_dims) + "/" + std::to_string(head_dim) +
              (select == RopeSelect::kHighFrequency ? " high-freq" : " norm"),
          MlaMode::kAbsorbed, rope_dims, select, "fp32"};
}

// Mode A at fp32 and fp16 latents; mode B keeping head_dim - 2, half, and one RoPE pair (by
// frequency), and one pair chosen by weight norm.
std::vector<MlaSeries> default_series(const ModelConfig& c) {
  const int hd = c.head_dim();
  std::vector<MlaSeries> series = {series_a("fp32"), series_a("fp16")};
  std::vector<int> rope_choices;
  for (int rd : {hd - 2, hd / 2, 2}) {
    if (rd > 0 && rd < hd && rd % 2 == 0 &&
        std::find(rope_choices.begin(), rope_choices.end(), rd) == rope_choices.end())
      rope_choices.push_back(rd);
  }
  for (int rd : rope_choices) series.push_back(series_b(rd, RopeSelect::kHighFrequency, hd));
  if (hd > 2) series.push_back(series_b(2, RopeSelect::kWeightNorm, hd));
  return series;
}

// One --mla-series item: a, a-fp16, bD or bD-norm.
MlaSeries parse_series(const std::string& item, int head_dim) {
  if (item == "a") return series_a("fp32");
  if (item == "a-fp16") return series_a("fp16");
  const std::string suffix = "-norm";
  std::string digits = item.size() > 1 && item[0] == 'b' ? item.substr(1) : "";
  const bool norm = digits.size() > suffix.size() &&
                    digits.compare(digits.size() - suffix.size(), suffix.size(), suffix) == 0;
  if (norm) digits.resize(digits.size() - suffix.size());
  const bool numeric =
      !digits.empty() && digits.size() <= 4 &&
      std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  const int d = numeric ? std::stoi(digits) : -1;
  if (d < 2 || d >= head_dim || d % 2 != 0) {
    fail_expected("--mla-series",
                  "a, a-fp16, bD or bD-norm with D even in [2, " + std::to_string(head_dim - 2) +
                      "] (rotary dims kept per KV head)",
                  "'" + item + "'");
  }
  return series_b(d, norm ? RopeSelect::kWeightNorm : RopeSelect::kHighFrequency, head_dim);
}

std::vector<MlaSeries> chosen_series(const std::string& list, const ModelConfig& c) {
  if (list.empty()) return default_series(c);
  std::vector<MlaSeries> series;
  for (const std::string& item : split_list(list))
    series.push_back(parse_series(item, c.head_dim()));
  return series;
}

// The ranks one series runs: --mla-ranks ("full" = the series' full rank), sorted and without
// repeats, or eighths of its full rank.
std::vector<int> series_ranks(const std::string& list, const ModelConfig& c, const MlaSeries& s) {
  if (list.empty()) return mla_sweep_ranks(c, s.rope_dims);
  const int full = mla_full_rank(c, s.rope_dims);
  std::vector<int> ranks;
  for (const std::string& item : split_list(list)) {
    const int rank = item == "full" ? full
                                    : parse_int_list(item, "--mla-ranks", 1, 1 << 20,
                                                     "ranks (positive integers) or 'full'")[0];
    if (rank > full) {
      fail_expected("--mla-ranks",
                    "ranks up to " + std::to_string(full) + ", the full rank of " + s.label,
                    std::to_string(rank));
    }
    ranks.push_back(rank);
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

std::vector<MlaRow> evaluate_mla_rows(const QualityEvaluator& evaluator, const Model& model,
                                      int block_size, const MlaSweepChoice& choice) {
  const std::vector<MlaSeries> series = chosen_series(choice.series, model.config());
  // Every choice is checked before the first (long) evaluation starts.
  std::vector<std::vector<int>> ranks;
  for (const MlaSeries& s : series) ranks.push_back(series_ranks(choice.ranks, model.config(), s));
  std::vector<MlaRow> rows;
  int runs = 0;
  for (const std::vector<int>& r : ranks) runs += static_cast<int>(r.size());
  Progress progress("eval mla-sweep", runs, "positions");
  for (std::size_t i = 0; i < series.size(); ++i) {
    const MlaSeries& s = series[i];
    for (int rank : ranks[i]) {
      progress.step(s.label + " rank " + std::to_string(rank));
      MlaRow row;
      row.series = s.label;
      row.options = {s.mode, rank, s.rope_dims, s.select};
      row.format = parse_kv_format(s.format, "sweep");
      auto codec = std::make_shared<MlaCodec>(make_mla_codec(model, row.options));
      row.energy_mean = mean(codec->energy_kept);
      row.energy_min = *std::min_element(codec->energy_kept.begin(), codec->energy_kept.end());
      auto variant = make_mla_variant(codec, row.format, block_size);
      row.report = evaluator.evaluate(*variant, progress.callback());
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

void write_mla_csv(const std::string& path, const std::vector<MlaRow>& rows,
                   const std::vector<QualityReport>& formats) {
  write_file_atomically(path, [&](std::ostream& os) {
    using namespace sweep_csv;
    SweepCsvWriter csv(os, SweepCsvKind::kMla);
    auto line = [&](const QualityReport& r, const std::string& kind, int rank, int rope,
                    double e_mean, double e_min) {
      write_bytes_cells(csv, r);
      csv.text(kKind, kind)
          .integer(kRank, rank)
          .integer(kRopeDims, rope)
          .number(kEnergyKeptMean, e_mean)
          .number(kEnergyKeptMin, e_min);
      write_quality_cells(csv, r);
      csv.end_row();
    };
    for (const MlaRow& m : rows) {
      line(m.report, m.options.mode == MlaMode::kReconstruct ? "mla-a" : "mla-b", m.options.rank,
           m.options.rope_dims, m.energy_mean, m.energy_min);
    }
    for (const QualityReport& r : formats) line(r, "format", 0, 0, 1.0, 1.0);
  });
}

// KL and perplexity change against exact bytes per token, MLA series beside the KV formats.
void write_mla_plots(const std::string& out_dir, const std::string& command,
                     const std::vector<MlaRow>& rows, const std::vector<QualityReport>& formats) {
  const double kl_floor = 1e-9;  // exact variants (rounding-level KL) would squash the log axis
  PlotSpec kl;
  kl.title = "MLA ranks vs KV formats: KL vs bytes/token";
  kl.x_label = "bytes per token, all layers (log)";
  kl.y_label = "mean KL (nats, log; < 1e-9 not drawn)";
  kl.log_x = kl.log_y = true;
  char note[96];
  std::snprintf(note, sizeof note, "; fp32 K/V %.0f B/token",
                formats.front().effective_bytes_per_token);
  kl.footnote = command + note;
  PlotSpec ppl = kl;
  ppl.title = "MLA ranks vs KV formats: perplexity change";
  ppl.y_label = "perplexity - fp32 perplexity (log; <= 0 not drawn)";
  auto add = [](PlotSpec& spec, const std::string& label, bool line, double x, double y) {
    auto it = std::find_if(spec.series.begin(), spec.series.end(),
                           [&](const PlotSeries& s) { return s.label == label; });
    if (it == spec.series.end()) {
      PlotSeries s;
      s.label = label;
      s.line = line;
      s.markers = true;
      spec.series.push_back(s);
      it = spec.series.end() - 1;
    }
    it->x.push_back(x);
    it->y.push_back(y);
  };
  for (const MlaRow& m : rows) {
    if (m.report.kl_mean >= kl_floor)
      add(kl, m.series, true, m.report.effective_bytes_per_token, m.report.kl_mean);
    add(ppl, m.series, true, m.report.effective_bytes_per_token,
        m.report.ppl_variant - m.report.ppl_reference);
  }
  for (const QualityReport& r : formats) {
    if (r.variant == "fp32") continue;
    if (r.kl_mean >= kl_floor)
      add(kl, "KV formats (fp16 ... int2, KIVI)", false, r.effective_bytes_per_token, r.kl_mean);
    add(ppl, "KV formats (fp16 ... int2, KIVI)", false, r.effective_bytes_per_token,
        r.ppl_variant - r.ppl_reference);
  }
  write_png_plot(kl, out_dir + "/mla_pareto_kl.png");
  write_png_plot(ppl, out_dir + "/mla_pareto_ppl.png");
}

void print_mla_json(const std::vector<MlaRow>& rows, const std::vector<QualityReport>& formats) {
  nlohmann::json j = nlohmann::json::array();
  for (const MlaRow& m : rows) {
    nlohmann::json e = report_json(m.report);
    e["rank"] = m.options.rank;
    e["rope_dims"] = m.options.rope_dims;
    e["energy_kept_mean"] = m.energy_mean;
    e["energy_kept_min"] = m.energy_min;
    j.push_back(e);
  }
  for (const QualityReport& r : formats) j.push_back(report_json(r));
  std::printf("%s\n", j.dump(2).c_str());
}

void print_mla_table(const std::string& source, int block_size, const std::vector<MlaRow>& rows,
                     const std::vector<QualityReport>& formats) {
  const QualityReport& ref = formats.front();
  std::printf("source: %s; %d windows, %ld scored positions, block %d, mean window %.1f tokens\n",
              source.c_str(), ref.windows, ref.positions, block_size, ref.mean_window_tokens);
  std::printf(
      "| variant | energy kept (mean, min over layers) | bytes/token | vs fp32 | perplexity "
      "| delta | mean KL | max KL | top-1 agree |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  auto print = [&](const QualityReport& r, const std::string& energy) {
    std::printf("| %s | %s | %.2f | %.3fx | %.4f | %+.4f | %.2e | %.2e | %.2f%% |\n",
                r.variant.c_str(), energy.c_str(), r.effective_bytes_per_token,
                r.reference_bytes_per_token / r.effective_bytes_per_token, r.ppl_variant,
                r.ppl_variant - r.ppl_reference, r.kl_mean, r.kl_max, 100.0 * r.top1_agreement);
  };
  for (const MlaRow& m : rows) {
    char e[48];
    std::snprintf(e, sizeof e, "%.4f, %.4f", m.energy_mean, m.energy_min);
    print(m.report, e);
  }
  for (const QualityReport& r : formats) print(r, "-");
}

}  // namespace

void check_mla_sweep_choice(const MlaSweepChoice& choice, const ModelConfig& c) {
  for (const MlaSeries& s : chosen_series(choice.series, c)) series_ranks(choice.ranks, c, s);
}

int run_mla_sweep(const QualityEvaluator& evaluator, const Model& model, int block_size,
                  const MlaSweepChoice& choice, const std::string& source,
                  const std::string& out_dir, bool json) {
  const std::vector<MlaRow> rows = evaluate_mla_rows(evaluator, model, block_size, choice);
  const std::vector<QualityReport> formats = evaluate_format_sweep(evaluator, block_size);
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw Error(out_dir, "cannot create the --out directory: " + ec.message());
  std::string command = "kvscope eval mla-sweep --block-size ";
  command.append(std::to_string(block_size))
      .append(" (")
      .append(std::filesystem::path(source).filename().string())
      .append(")");
  write_mla_csv(out_dir + "/mla_sweep.csv", rows, formats);
  write_mla_plots(out_dir, command, rows, formats);
  if (json) {
    print_mla_json(rows, formats);
    return 0;
  }
  print_mla_table(source, block_size, rows, formats);
  std::printf("wrote %s/mla_sweep.csv, mla_pareto_kl.png, mla_pareto_ppl.png\n", out_dir.c_str());
  return 0;
}

}  // namespace kvscope::cli

// Quality vs memory panel: sweep status, CSV loading (merged) and the two Pareto plots.
#include "app/panels/quality_panel.h"
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "app/core/quality_cache.h"
#include "app/core/quality_shipped.h"
#include "app/core/run_info.h"
#include "app/core/theme.h"
#include "app/widgets/plot.h"
#include "app/widgets/widgets.h"
#if defined(__EMSCRIPTEN__)
#include "app/web/web_page.h"
#endif

namespace kvscope::ui {

namespace {

// Panels shorter than this many text lines get the one-line setup (as in presenter mode).
constexpr float kCompactBelowLines = 30.0f;

constexpr double kKlFloor = 1e-9;  // exact variants (rounding-level KL) would squash the log axis

std::string filename(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

// The two plots' series from the sweep's points: KL and perplexity ratio over bytes per token.
void quality_series(const QualitySweep& sweep, std::vector<PlotSeries>& kl,
                    std::vector<PlotSeries>& ppl) {
  // One series per family member (KV formats, MLA-A, window, h2o, ...) in order of appearance;
  // formats are separate points, MLA ranks and eviction budgets are joined by lines.
  for (const QualityPoint& p : sweep.points) {
    if (p.family == QualityFamily::kFormat && p.label == "fp32") continue;  // the reference line
    auto it = std::find_if(kl.begin(), kl.end(),
                           [&](const PlotSeries& s) { return s.label == p.series; });
    if (it == kl.end()) {
      PlotSeries s;
      s.label = p.series;
      s.line = p.family != QualityFamily::kFormat;
      s.markers = true;
      s.color = series_color(static_cast<int>(kl.size()));
      kl.push_back(s);
      ppl.push_back(s);
      it = kl.end() - 1;
    }
    PlotSeries& y_ppl = ppl[static_cast<std::size_t>(it - kl.begin())];
    if (p.report.kl_mean >= kKlFloor) {
      it->x.push_back(p.bytes_per_token);
      it->y.push_back(p.report.kl_mean);
      it->point_labels.push_back(p.label);
    }
    // Perplexity as a ratio to the variant's own fp32 reference: always positive (a log axis
    // spreads int2's 20x and int8's 1.001x), and comparable across loaded CSVs whose eval texts
    // and references differ.
    if (p.report.ppl_reference > 0) {
      y_ppl.x.push_back(p.bytes_per_token);
      y_ppl.y.push_back(p.report.ppl_variant / p.report.ppl_reference);
      y_ppl.point_labels.push_back(p.label);
    }
  }
}

// Sorts each series' points by x, their labels with them.
void sort_series_by_x(std::vector<PlotSeries>& kl, std::vector<PlotSeries>& ppl) {
  // x ascending within each series (hover and lines expect it).
  for (std::vector<PlotSeries>* all : {&kl, &ppl}) {
    for (PlotSeries& s : *all) {
      std::vector<std::size_t> order(s.x.size());
      std::iota(order.begin(), order.end(), std::size_t{0});
      std::stable_sort(order.begin(), order.end(),
                       [&](std::size_t a, std::size_t b) { return s.x[a] < s.x[b]; });
      PlotSeries sorted = s;
      for (std::size_t i = 0; i < order.size(); ++i) {
        sorted.x[i] = s.x[order[i]];
        sorted.y[i] = s.y[order[i]];
        sorted.point_labels[i] = s.point_labels[order[i]];
      }
      s = std::move(sorted);
    }
  }
}

// Fixed ranges with room for the labels: x over the points and the reference, y over the data.
struct QualityRanges {
  double xlo, xhi;  // bytes per token
  double klo, khi;  // KL
  double rlo, rhi;  // perplexity ratio
};

QualityRanges quality_ranges(const std::vector<PlotSeries>& kl, const std::vector<PlotSeries>& ppl,
                             double ref_bytes) {
  double xlo = ref_bytes > 0 ? ref_bytes : 1e300, xhi = ref_bytes > 0 ? ref_bytes : 0.0;
  double klo = 1e300, khi = 0.0, rlo = 1.0, rhi = 1.0;
  for (const PlotSeries& s : ppl) {
    for (double x : s.x) {
      if (x > 0) xlo = std::min(xlo, x), xhi = std::max(xhi, x);
    }
    for (double y : s.y) rlo = std::min(rlo, y), rhi = std::max(rhi, y);
  }
  for (const PlotSeries& s : kl) {
    for (double y : s.y) klo = std::min(klo, y), khi = std::max(khi, y);
  }
  if (xhi <= 0) xlo = 1.0, xhi = 1.0;
  if (khi <= 0) klo = 1e-3, khi = 1.0;
  return {xlo, xhi, klo, khi, rlo, rhi};
}

}  // namespace

std::string QualityPanel::help() const {
  return "Fewer bits per value (KV formats), a low-rank latent per token (MLA, "
         "docs/concepts/mla.md) or dropping tokens to a budget (eviction, "
         "docs/concepts/eviction.md) shrink the KV bytes per token of context but perturb "
         "attention. The cost shows as KL divergence of the next-token distribution and a change "
         "in perplexity against the exact fp32 cache; points toward the bottom left are better.";
}

namespace {

// Whether the run's model can be evaluated (real weights with a tokenizer).
bool can_evaluate(const RunInfo* info) {
  return info && info->model && info->tokenizer && !info->random_weights;
}

}  // namespace

std::string QualityPanel::shown_title(const AppState& state) const {
  const std::shared_ptr<const RunInfo> info = state.source().run_info();
  // The run's model once the panel follows it (draw() drops figures of an earlier model), else
  // the model of the computed points shown (none for CSV points alone: each names its own).
  std::string model;
  if (can_evaluate(info.get()))
    model = info->model_name;
  else if (sweep_ && !sweep_->model.empty())
    model = model_display_name(sweep_->model);
  return model.empty() ? std::string(title()) : std::string(title()) + ": " + model;
}

void QualityPanel::draw(AppState& state) {
  take_job_result();
  const std::shared_ptr<const RunInfo> info = state.source().run_info();
  const bool can_run = can_evaluate(info.get());
  start_for_model(info.get(), can_run);
  const Palette& pal = palette(state.presenter);
  draw_job_status(info.get(), can_run);
  if (!error_.empty())
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(pal.warn), "%s", error_.c_str());
  // Presenter mode, and a short panel (1280x720), keep the room for the plots: the setup is one
  // line (details in its tooltip) and loading CSVs is left to a taller panel. Otherwise the
  // lines above the plots (a progress bar, a shipped-results note) would change with the job's
  // state and squeeze the plots below legible.
  const bool compact =
      state.presenter ||
      ImGui::GetContentRegionAvail().y < kCompactBelowLines * ImGui::GetTextLineHeightWithSpacing();
  if (sweep_ && compact) {
    draw_compact_setup();
    draw_plots(state);
    return;
  }
  if (sweep_) {
    draw_setup_lines(/*wrap=*/true);
    if (draw_recompute_button(can_run)) return;
  }
  draw_csv_loader();
  if (sweep_) draw_plots(state);
}

void QualityPanel::take_job_result() {
  if (std::shared_ptr<QualitySweep> s = job_.take()) {
    if (s->error.empty())
      sweep_ = std::move(s);
    else
      error_ = s->error;
  } else if (job_.busy()) {
    // Shipped results for these inputs, refined point by point as the live sweep finishes them.
    if (std::shared_ptr<const QualitySweep> p = job_.preview(); p && p != sweep_) sweep_ = p;
  }
}

void QualityPanel::start_for_model(const RunInfo* info, bool can_run) {
  // The run moved to another model (Controls panel): the figures shown, computed or loaded
  // beside them, are the old model's; drop them and start over on the new one.
  if (can_run && !started_for_.empty() && started_for_ != info->model_source) {
    job_.cancel();
    sweep_.reset();
    error_.clear();
    started_for_.clear();
  }
  // Start once per model, in the background, when nothing was loaded from a CSV.
  if (can_run && !job_.busy() && started_for_ != info->model_source &&
      !(sweep_ && sweep_->from_csv)) {
    started_for_ = info->model_source;
    error_.clear();
    cancelled_ = false;
    started_at_ = std::chrono::steady_clock::now();
    job_.start(info->model, info->tokenizer, default_eval_text_path(), kEvalTokens,
               info->config.block_size, sweep_cache_dir(), !recompute_, shipped_sweeps_dir());
    recompute_ = false;
  }
}

void QualityPanel::draw_job_status(const RunInfo* info, bool can_run) {
  if (job_.busy()) {
    const int total = job_.total_steps();
    const float f = (static_cast<float>(job_.steps_done()) + job_.fraction_in_step()) /
                    static_cast<float>(std::max(1, total));
    // Runs done and the time so far first (a first sweep on SmolLM2 takes minutes:
    // docs/ui/quality.md), so that a narrow bar clips the description, not the figures.
    const long secs = static_cast<long>(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_at_).count());
    const bool shipped = sweep_ && !sweep_->shipped_note.empty();
    char label[160];
    std::snprintf(label, sizeof label, "%d / %d runs, %ld:%02ld elapsed: %s",
                  std::max(0, job_.steps_done() - 1), total - 1, secs / 60, secs % 60,
                  shipped ? "recomputing the shipped results live, point by point"
                          : "KV formats, MLA ranks and eviction budgets on the real model");
    const float cancel_w = ImGui::CalcTextSize("Cancel").x +
                           ImGui::GetStyle().FramePadding.x * 2.0f +
                           ImGui::GetStyle().ItemSpacing.x;
    ImGui::ProgressBar(f, ImVec2(-cancel_w, 0), label);
    ImGui::SameLine();
    if (ImGui::Button("Cancel")) {
      job_.cancel();
      cancelled_ = true;
    }
    item_tooltip(shipped ? "Stop the live sweep (the points shown stay: shipped ones and those "
                           "recomputed so far)"
                         : "Stop the sweep (the points computed so far are dropped)");
  } else if (cancelled_ && !sweep_) {
    ImGui::TextDisabled("sweep cancelled");
    ImGui::SameLine();
    if (ImGui::Button("Run the sweep")) {
      cancelled_ = false;
      started_for_.clear();  // starts next frame
    }
  } else if (!can_run && !sweep_) {
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextDisabled(info && info->random_weights
                            ? "This run uses random weights: no quality figure is meaningful. "
                              "Load a sweep CSV instead."
                            : "No trained model loaded with this run: load a sweep CSV written by "
                              "`kvscope eval format-sweep`, `mla-sweep` or `evict-sweep`.");
    ImGui::PopTextWrapPos();
  }
}

void QualityPanel::draw_compact_setup() const {
  // The model is in the panel's title.
  std::string setup = sweep_->model.empty() ? std::string("points loaded from CSV")
                                            : std::to_string(sweep_->positions) + " tokens";
  if (!sweep_->shipped_note.empty()) setup += " (shipped results)";
  ImGui::PushTextWrapPos(0.0f);
  ImGui::TextDisabled("%s vs fp32", setup.c_str());  // the setup in its tooltip
  ImGui::PopTextWrapPos();
  if (ImGui::IsItemHovered()) {
    ImGui::BeginTooltip();
    draw_setup_lines(/*wrap=*/false);
    ImGui::EndTooltip();
  }
}

bool QualityPanel::draw_recompute_button(bool can_run) {
  if ((sweep_->from_cache || !sweep_->shipped_note.empty()) && can_run && !job_.busy()) {
    if (ImGui::Button("Recompute")) {
      recompute_ = true;
      sweep_.reset();
      started_for_.clear();  // starts next frame, ignoring the cache
      return true;
    }
    item_tooltip(sweep_->from_cache
                     ? "Run the sweep again instead of reading it from the disk cache (the new "
                       "result replaces the cached one)"
                     : "Run the live sweep again (the shipped results are shown meanwhile)");
  }
  return false;
}

bool QualityPanel::load_csv(const std::string& path) {
  try {
    QualitySweep loaded = load_sweep_csv(path);
    job_.cancel();
    auto merged =
        sweep_ ? std::make_shared<QualitySweep>(*sweep_) : std::make_shared<QualitySweep>();
    merge_sweep(*merged, loaded);
    sweep_ = std::move(merged);
    error_.clear();
    return true;
  } catch (const std::exception& e) {
    error_ = e.what();
    return false;
  }
}

void QualityPanel::draw_csv_loader() {
  constexpr const char* kWhat =
      "quant_sweep.csv, mla_sweep.csv or evict_sweep.csv written by `kvscope eval format-sweep`, "
      "`mla-sweep` or `evict-sweep` (--out DIR); merged into the points shown";
#if defined(__EMSCRIPTEN__)
  // The page reads no paths: the file comes from the browser's picker (UiShell::open loads it).
  if (ImGui::Button("Load CSV...")) web_pick_file();
  item_tooltip((std::string("Pick ") + kWhat + " (File > Open takes one too)").c_str());
#else
  ImGui::SetNextItemWidth(std::max(80.0f, ImGui::GetContentRegionAvail().x -
                                              ImGui::CalcTextSize("Load CSV").x -
                                              ImGui::GetStyle().FramePadding.x * 4.0f));
  ImGui::InputText("##csv", csv_path_, sizeof csv_path_);
  item_tooltip(kWhat);
  ImGui::SameLine();
  if (ImGui::Button("Load CSV")) load_csv(csv_path_);
#endif
}

void QualityPanel::draw_setup_lines(bool wrap) const {
  if (wrap) ImGui::PushTextWrapPos(0.0f);
  if (!sweep_->source.empty())
    ImGui::TextDisabled("%s, %ld scored tokens (%d window%s of %s), block %d, vs the fp32 cache",
                        filename(sweep_->model).c_str(), sweep_->positions, sweep_->windows,
                        sweep_->windows == 1 ? "" : "s", filename(sweep_->source).c_str(),
                        sweep_->block_size);
  if (!sweep_->loaded.empty()) {
    std::string names;
    for (const std::string& p : sweep_->loaded) names += (names.empty() ? "" : ", ") + p;
    ImGui::TextDisabled("loaded from %s (each with its own eval setup)", names.c_str());
  }
  ImGui::TextDisabled(
      "x: KV bytes per token of context; eviction: each window's peak block bytes / its tokens");
  if (!sweep_->mla_note.empty()) ImGui::TextDisabled("%s", sweep_->mla_note.c_str());
  if (!sweep_->cache_note.empty()) ImGui::TextDisabled("%s", sweep_->cache_note.c_str());
  if (!sweep_->shipped_note.empty()) {
    // Where the figures came from (the commit and run time in its tooltip: one line less for the
    // plots), and how far the live sweep has got in replacing them.
    const std::string done =
        std::to_string(sweep_->points_recomputed) + " / " + std::to_string(sweep_->points.size());
    const std::string live =
        job_.busy() ? done + " recomputed live so far" : "live recompute stopped after " + done;
    ImGui::TextDisabled("%s; %s", sweep_->shipped_note.c_str(), live.c_str());
    if (wrap) item_tooltip(sweep_->shipped_detail.c_str());
  }
  if (wrap) ImGui::PopTextWrapPos();
}

void QualityPanel::draw_plots(AppState& state) {
  const Palette& pal = palette(state.presenter);
  std::vector<PlotSeries> kl, ppl;
  quality_series(*sweep_, kl, ppl);
  sort_series_by_x(kl, ppl);
  const double ref_bytes = sweep_->reference_bytes_per_token;
  std::vector<PlotRefLine> refs;
  if (ref_bytes > 0) refs.push_back({ref_bytes, "fp32 (exact)", pal.text_dim, true, false});
  const auto [xlo, xhi, klo, khi, rlo, rhi] = quality_ranges(kl, ppl, ref_bytes);
  // A short panel in presenter mode shows one plot, picked here, at full size.
  const bool one = state.presenter &&
                   ImGui::GetContentRegionAvail().y < ImGui::GetTextLineHeightWithSpacing() * 16.0f;
  if (one) {
    flow_same_line(check_width("perplexity / fp32") + check_width("KL") + 30.0f, 16.0f);
    if (ImGui::RadioButton("perplexity / fp32", !show_kl_)) show_kl_ = false;
    flow_same_line(check_width("KL"), ImGui::GetStyle().ItemSpacing.x);
    if (ImGui::RadioButton("KL", show_kl_)) show_kl_ = true;
  }
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  // Side by side in a wide or a short panel, else one above the other.
  const bool side = !one && (avail.x > 900.0f || avail.x > avail.y * 1.5f);
  const float gap = ImGui::GetStyle().ItemSpacing.x;
  const ImVec2 size = one    ? avail
                      : side ? ImVec2((avail.x - gap) * 0.5f, avail.y)
                             : ImVec2(avail.x, std::max(120.0f, (avail.y - gap) * 0.5f));
  PlotConfig c;
  c.id = "quality_kl";
  c.title = one ? "" : "KL(fp32 || variant), mean per token";  // one: the radio names it
  c.x = {"KV bytes per token of context (all layers, K+V)", AxisUnits::kBytes, true, xlo / 1.25,
         xhi * 1.7};
  c.y = {"KL (nats; < 1e-9 not drawn)", AxisUnits::kNumber, true, klo / 2.0, khi * 8.0};
  c.y_short_label = "KL (nats)";
  c.size = size;
  c.legend = true;
  c.line_scale = state.presenter ? 1.6f : 1.0f;
  if (!one || show_kl_) plot(c, kl, refs);
  if (one && show_kl_) return;
  if (side) ImGui::SameLine();
  c.id = "quality_ppl";
  c.title = one ? "" : "perplexity vs fp32 (ratio)";
  c.y = {"perplexity / fp32 perplexity", AxisUnits::kNumber, true, rlo / 1.02,
         std::max(rhi * 1.6, 1.1)};
  c.y_short_label = "ppl / fp32";
  refs.push_back({1.0, "1 = exact", pal.text_dim, false, true});
  plot(c, ppl, refs);
}

}  // namespace kvscope::ui

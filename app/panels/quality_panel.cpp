// Quality vs memory panel: sweep status, CSV loading and the two Pareto plots.
#include "app/panels/quality_panel.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "app/core/run_info.h"
#include "app/core/theme.h"
#include "app/widgets/plot.h"
#include "app/widgets/widgets.h"

namespace kvscope::ui {

std::string QualityPanel::help() const {
  return "Storing K and V in fewer bits shrinks the cache (more tokens per GB) but perturbs "
         "attention; the cost shows as KL divergence of the next-token distribution and a change "
         "in perplexity against the exact fp32 cache. Points toward the bottom left are better.";
}

void QualityPanel::draw(AppState& state) {
  if (std::shared_ptr<QualitySweep> s = job_.take()) {
    if (s->error.empty())
      sweep_ = std::move(s);
    else
      error_ = s->error;
  }
  const std::shared_ptr<const RunInfo> info = state.source().run_info();
  const bool can_run = info && info->model && info->tokenizer && !info->random_weights;
  // Start once per model, in the background, when nothing was loaded from a CSV.
  if (can_run && !job_.busy() && started_for_ != info->model_source &&
      !(sweep_ && sweep_->from_csv)) {
    started_for_ = info->model_source;
    error_.clear();
    job_.start(info->model, info->tokenizer,
               std::string(KVSCOPE_SOURCE_DIR) + "/assets/text/eval_stories.txt", kEvalTokens,
               info->config.block_size);
  }
  const Palette& pal = palette(state.presenter);
  if (job_.busy()) {
    const int total = static_cast<int>(sweep_formats().size()) + 1;
    const float f = (static_cast<float>(job_.formats_done()) + job_.fraction_in_format()) /
                    static_cast<float>(total);
    char label[96];
    std::snprintf(label, sizeof label, "evaluating %d KV formats on the real model: %d / %d",
                  total - 1, std::max(0, job_.formats_done() - 1), total - 1);
    ImGui::ProgressBar(f, ImVec2(-1, 0), label);
  } else if (!can_run && !sweep_) {
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextDisabled(info && info->random_weights
                            ? "This run uses random weights: no quality figure is meaningful. "
                              "Load a sweep CSV instead."
                            : "No trained model loaded with this run: load a sweep CSV written by "
                              "`kvscope eval --sweep`.");
    ImGui::PopTextWrapPos();
  }
  if (!error_.empty())
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(pal.warn), "%s", error_.c_str());
  if (sweep_) {
    ImGui::PushTextWrapPos(0.0f);
    if (sweep_->from_csv)
      ImGui::TextDisabled("%s", sweep_->source.c_str());
    else
      ImGui::TextDisabled("%s, %ld scored tokens (%d windows of %s), block %d, vs the fp32 cache",
                          std::filesystem::path(sweep_->model).filename().c_str(),
                          sweep_->positions, sweep_->windows,
                          std::filesystem::path(sweep_->source).filename().c_str(),
                          sweep_->block_size);
    ImGui::PopTextWrapPos();
  }
  ImGui::SetNextItemWidth(std::max(80.0f, ImGui::GetContentRegionAvail().x -
                                              ImGui::CalcTextSize("Load CSV").x -
                                              ImGui::GetStyle().FramePadding.x * 4.0f));
  ImGui::InputText("##csv", csv_path_, sizeof csv_path_);
  item_tooltip("A quant_sweep.csv written by `kvscope eval --sweep --out DIR`");
  ImGui::SameLine();
  if (ImGui::Button("Load CSV")) {
    try {
      job_.cancel();
      sweep_ = std::make_shared<QualitySweep>(load_sweep_csv(csv_path_));
      error_.clear();
    } catch (const std::exception& e) {
      error_ = e.what();
    }
  }
  if (sweep_) draw_plots(state);
}

void QualityPanel::draw_plots(AppState& state) {
  const Palette& pal = palette(state.presenter);
  // One series per family so the legend explains the colours; fp32 is the reference line.
  PlotSeries kl, ppl;
  kl.label = ppl.label = "KV format";
  kl.line = ppl.line = false;
  kl.markers = ppl.markers = true;
  kl.color = ppl.color = pal.accent;
  double ref_bytes = 0.0;
  for (const QualityReport& r : sweep_->reports) {
    const double bytes =
        r.effective_bytes_per_token > 0 ? r.effective_bytes_per_token : r.footprint.bytes_per_token;
    if (r.variant == "fp32") {
      ref_bytes = bytes;
      continue;
    }
    kl.x.push_back(bytes);
    kl.y.push_back(r.kl_mean);
    kl.point_labels.push_back(r.variant);
    ppl.x.push_back(bytes);
    ppl.y.push_back(r.ppl_variant - r.ppl_reference);
    ppl.point_labels.push_back(r.variant);
  }
  std::vector<PlotRefLine> refs;
  if (ref_bytes > 0) refs.push_back({ref_bytes, "fp32 (exact)", pal.text_dim, true, false});
  // Fixed ranges with room for the labels: x up to the fp32 reference, y over the data.
  double xlo = ref_bytes > 0 ? ref_bytes : 1.0, xhi = xlo, klo = 1.0, khi = 1e-9;
  for (std::size_t i = 0; i < kl.x.size(); ++i) {
    xlo = std::min(xlo, kl.x[i]);
    xhi = std::max(xhi, kl.x[i]);
    if (kl.y[i] > 0) klo = std::min(klo, kl.y[i]), khi = std::max(khi, kl.y[i]);
  }
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const bool side = avail.x > 900.0f;
  const float gap = ImGui::GetStyle().ItemSpacing.x;
  const ImVec2 size = side ? ImVec2((avail.x - gap) * 0.5f, avail.y)
                           : ImVec2(avail.x, std::max(120.0f, (avail.y - gap) * 0.5f));
  PlotConfig c;
  c.id = "quality_kl";
  c.title = "KL(fp32 || format), mean per token";
  c.x = {"KV bytes per token (all layers, K+V)", AxisUnits::kBytes, true, xlo / 1.25, xhi * 1.7};
  c.y = {"KL (nats)", AxisUnits::kNumber, true, klo / 2.0, std::max(khi, klo) * 8.0};
  c.size = size;
  c.legend = false;
  c.line_scale = state.presenter ? 1.6f : 1.0f;
  plot(c, std::span<const PlotSeries>(&kl, 1), refs);
  if (side) ImGui::SameLine();
  c.id = "quality_ppl";
  c.title = "perplexity change vs fp32";
  c.y = {"perplexity delta", AxisUnits::kNumber, false, {}, {}};
  plot(c, std::span<const PlotSeries>(&ppl, 1), refs);
}

}  // namespace kvscope::ui

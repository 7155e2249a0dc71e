// Attention panel, quantization-error overlay: the checkbox and preview picker, and the strip of
// per-position K / V / attention-row error under the key axis (engine/analysis/kv_quant_error.h).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "app/core/run_info.h"
#include "app/core/theme.h"
#include "app/panels/attention_panel.h"
#include "app/widgets/widgets.h"

namespace kvscope::ui {

namespace {

constexpr float kRow = 0.8f;  // strip row height in font sizes
constexpr int kRows = 3;      // K, V, attention-row TV

bool is_fp32_run(const RunInfo& info) {
  return kv_is_fp32(info.config);
}

std::string formats_text(const KvErrorProfile& p) {
  if (p.k_format == p.v_format) return p.k_format.name();
  return "K " + p.k_format.name() + " / V " + p.v_format.name();
}

}  // namespace

void AttentionPanel::set_error_overlay(bool on, const std::string& preview) {
  parse_kv_format(preview, "attention overlay preview");  // throws on an unknown name
  show_errors_ = on;
  preview_ = preview;
}

std::optional<KvFormat> AttentionPanel::wanted_preview(const RunInfo& info) const {
  if (!show_errors_ || !is_fp32_run(info)) return std::nullopt;
  return parse_kv_format(preview_, "attention overlay preview");
}

float AttentionPanel::error_strip_height() const {
  if (!show_errors_) return 0.0f;
  const float fs = ImGui::GetFontSize();
  return fs * (kRows * kRow + 0.3f) + ImGui::GetTextLineHeightWithSpacing() * 2.0f;
}

void AttentionPanel::draw_error_controls(const RunInfo& info) {
  flow_same_line(check_width("Quantization error"), ImGui::GetStyle().ItemSpacing.x);
  ImGui::Checkbox("Quantization error", &show_errors_);
  item_tooltip(
      "A strip under the key axis with each position's quantization error. K, V: relative L2 "
      "error |dequant(quant(x)) - x| / |x| of the cached key / value vector, x the exact fp32 "
      "vector the model produced, stored and read back the way the cache does (KIVI: keys per "
      "channel over a group, newest group full precision): storage error alone, nothing "
      "propagated. A: total variation between this position's attention row (as query) with the "
      "quantized cache and with an fp32 cache; deeper layers include error propagated from "
      "earlier layers. A head shows its KV head (GQA); mean of heads shows the mean over KV "
      "heads.");
  if (!show_errors_ || !is_fp32_run(info)) return;
  // Own line: the header row is full at common panel widths.
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 6.0f);
  if (ImGui::BeginCombo("preview format", preview_.c_str())) {
    for (const std::string& name : kv_format_names()) {
      if (name == "fp32") continue;
      if (ImGui::Selectable(name.c_str(), name == preview_)) preview_ = name;
    }
    ImGui::EndCombo();
  }
  item_tooltip(
      "This run keeps K/V in fp32, so its cache has no quantization error. Pick a format to "
      "preview what it would do to this sequence (K and V in that format, measured on a "
      "background thread; the heatmap still shows the fp32 run).");
}

void AttentionPanel::draw_error_strip(AppState& state, const AttentionCapture& cap, int n, float x0,
                                      float step) {
  if (!show_errors_) return;
  const Palette& pal = palette(state.presenter);
  const KvErrorProfile* p = cap.errors.get();
  const std::shared_ptr<const RunInfo> info = state.source().run_info();
  const std::optional<KvFormat> want = info ? wanted_preview(*info) : std::nullopt;
  const bool measuring = cap.preview != want && info && is_fp32_run(*info);
  if (measuring || p == nullptr) {
    ImGui::PushTextWrapPos(0.0f);
    if (measuring)
      ImGui::TextDisabled("measuring what %s would do to seq %d on a background thread...",
                          preview_.c_str(), cap.request);
    else if (!cap.errors_note.empty())
      ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(pal.warn), "quantization error: %s",
                         cap.errors_note.c_str());
    else
      ImGui::TextDisabled("fp32 cache: no quantization error");
    ImGui::PopTextWrapPos();
    return;
  }
  const std::vector<std::uint8_t> live = state.source().slot_live(cap.request, state.step());
  const auto is_evicted = [&](int k) {
    return !live.empty() && static_cast<std::size_t>(k) < live.size() &&
           live[static_cast<std::size_t>(k)] == 0;
  };
  const int layer = std::clamp(layer_, 0, p->n_layers - 1);
  const int group = std::max(1, p->n_heads / std::max(1, p->kv_heads));
  const int kvh = std::clamp(head_ / group, 0, p->kv_heads - 1);
  const int shown = std::min(n, p->positions);
  // Per position: [0] K error, [1] V error, [2] attention-row TV.
  const auto value = [&](int row, int pos) {
    if (row == 2) {
      if (!mean_heads_) return p->tv(layer, std::clamp(head_, 0, p->n_heads - 1), pos);
      float s = 0.0f;
      for (int h = 0; h < p->n_heads; ++h) s += p->tv(layer, h, pos);
      return s / static_cast<float>(p->n_heads);
    }
    const auto one = [&](int h) { return row == 0 ? p->k(layer, h, pos) : p->v(layer, h, pos); };
    if (!mean_heads_) return one(kvh);
    float s = 0.0f;
    for (int h = 0; h < p->kv_heads; ++h) s += one(h);
    return s / static_cast<float>(p->kv_heads);
  };
  // One fixed log colour scale for every format and row, so int8 and int4 look as different as
  // they are: 1e-4 (0.01%) and below is the coolest colour, 1 (100%) the hottest.
  constexpr float kLogLo = -4.0f;
  const auto heat = [&](float e) {
    if (!(e > 0.0f)) return 0.0f;
    return std::clamp((std::log10(e) - kLogLo) / -kLogLo, 0.0f, 1.0f);  // colour only
  };
  float emax = 0.0f, tmax = 0.0f;  // for the legend
  for (int k = 0; k < shown; ++k) {
    if (is_evicted(k)) continue;
    emax = std::max({emax, value(0, k), value(1, k)});
    tmax = std::max(tmax, value(2, k));
  }
  const float fs = ImGui::GetFontSize(), rh = fs * kRow;
  const ImVec2 c0 = ImGui::GetCursorScreenPos();
  const float w = step * static_cast<float>(n), y0 = c0.y + fs * 0.3f;
  ImGui::InvisibleButton("##qerr",
                         ImVec2(std::max(1.0f, x0 - c0.x + w + fs * 1.2f), fs * 0.3f + kRows * rh));
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImU32 grey = mix_color(pal.block_free, pal.text_dim, 0.35f);
  static const char* const kLabels[kRows] = {"K", "V", "A"};
  for (int row = 0; row < kRows; ++row) {
    const float y = y0 + static_cast<float>(row) * rh;
    dl->AddRectFilled(ImVec2(x0, y), ImVec2(x0 + w, y + rh - 1.0f), pal.block_free);
    for (int k = 0; k < shown; ++k) {
      const ImU32 c =
          is_evicted(k) ? grey : attention_heat_color(heat(value(row, k)), pal.block_free);
      dl->AddRectFilled(ImVec2(x0 + static_cast<float>(k) * step, y),
                        ImVec2(x0 + static_cast<float>(k + 1) * step, y + rh - 1.0f), c);
    }
    dl->AddText(nullptr, rh, ImVec2(x0 + w + fs * 0.25f, y), pal.text_dim, kLabels[row]);
  }
  if (ImGui::IsItemHovered()) {
    const int k = static_cast<int>((ImGui::GetIO().MousePos.x - x0) / step);
    if (k >= 0 && k < shown) {
      ImGui::BeginTooltip();
      ImGui::Text("position %d \"%s\"", k, token_text(state, cap, k).c_str());
      if (is_evicted(k)) {
        ImGui::TextDisabled("evicted at this step: no error shown");
      } else {
        const std::string where = mean_heads_
                                      ? "mean over " + std::to_string(p->kv_heads) + " KV heads"
                                      : "KV head " + std::to_string(kvh);
        ImGui::Text("K error %.3f%%, V error %.3f%% (%s, layer %d, %s)", 100.0 * value(0, k),
                    100.0 * value(1, k), formats_text(*p).c_str(), layer, where.c_str());
        if (p->k_format.is_kivi() && value(0, k) == 0.0f)
          ImGui::TextDisabled("KIVI: this position's group is still open (full precision)");
        ImGui::Text("attention row of query %d: total variation %.4f vs the fp32 cache", k,
                    value(2, k));
        ImGui::TextDisabled(
            "K/V: storage round trip only. Attention: the quantized run itself, so layers after "
            "0 include propagated error.");
      }
      ImGui::EndTooltip();
    }
  }
  // Legend: the colormap and what its ends mean.
  const ImVec2 l0 = ImGui::GetCursorScreenPos();
  const float lw = fs * 4.0f, lh = fs * 0.6f;
  for (int i = 0; i < 16; ++i)
    dl->AddRectFilled(ImVec2(l0.x + lw * static_cast<float>(i) / 16.0f, l0.y + fs * 0.2f),
                      ImVec2(l0.x + lw * static_cast<float>(i + 1) / 16.0f, l0.y + fs * 0.2f + lh),
                      attention_heat_color(static_cast<float>(i) / 15.0f, pal.block_free));
  ImGui::Dummy(ImVec2(lw, fs));
  ImGui::SameLine();
  ImGui::PushTextWrapPos(0.0f);
  char legend[256];
  std::snprintf(legend, sizeof legend,
                "%s%s, log colour scale 0.01%% .. 100%% for every format: K, V relative L2 error "
                "(largest here %.2f%%), A attention-row TV (largest %.3f)%s",
                cap.preview ? "preview " : "", formats_text(*p).c_str(), 100.0 * emax, tmax,
                live.empty() ? "" : "; grey: evicted");
  ImGui::TextDisabled("%s", legend);
  ImGui::PopTextWrapPos();
}

}  // namespace kvscope::ui

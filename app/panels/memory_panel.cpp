// Memory vs context panel: formula, log-log plot with GPU lines, and a max-context table.
#include "app/panels/memory_panel.h"

#include <algorithm>
#include <cmath>

#include "app/core/run_info.h"
#include "app/core/theme.h"
#include "app/widgets/plot.h"
#include "app/widgets/widgets.h"
#include "engine/analysis/memory_math.h"
#include "engine/analysis/quality.h"
#include "engine/common/interconnect.h"

namespace kvscope::ui {

namespace {

constexpr double kH100Bytes = 80e9;
// A ring device's attention FLOPS: an H100 SXM's dense bf16 (kvscope memwall --ring's default).
constexpr double kRingFlops = 989e12;
// The context of the table's ring column.
constexpr std::int64_t kRingTokens = 131072;
constexpr double kH200Bytes = 141e9;

// One sequence's cache from 1K to 1M tokens, one point per power of two.
template <class BytesAt>
PlotSeries curve(const std::string& label, ImU32 color, BytesAt bytes_at) {
  PlotSeries s;
  s.label = label;
  s.color = color;
  for (int k = 10; k <= 20; ++k) {
    const double tokens = std::ldexp(1.0, k);
    s.x.push_back(tokens);
    s.y.push_back(bytes_at(tokens));
  }
  s.markers = true;
  return s;
}

// A table cell's context: "no limit" once the cache stops growing below the memory.
std::string context_text(double tokens) {
  return std::isinf(tokens) ? "no limit" : format_tick(tokens, AxisUnits::kTokens);
}

std::string loaded_label(const AppState& state) {
  const TimelineHeader& h = state.header();
  std::string label = "loaded run (" + h.kv_format + ")";
  if (state.is_demo())
    label += " [demo data]";
  else if (h.random_weights)
    label += " [random weights]";
  return label;
}

// Whether the run's model can be measured: it needs a model (recordings and traces have none) and
// a K/V cache (an MLA run caches latents instead).
bool can_measure(const RunInfo* info) {
  return info != nullptr && info->model && !info->config.mla;
}

std::string contexts_text(const std::vector<int>& contexts) {
  std::string out;
  for (std::size_t i = 0; i < contexts.size(); ++i) {
    if (i > 0) out += i + 1 == contexts.size() ? " and " : ", ";
    out += format_tick(contexts[i], AxisUnits::kTokens);
  }
  return out;
}

}  // namespace

MemoryPanel::MemoryPanel() : shapes_(published_kv_shapes()) {}

std::string MemoryPanel::help() const {
  return "The KV cache grows linearly with context: every token keeps a key and a value vector "
         "per layer and KV head, so bytes = 2 x layers x kv_heads x head_dim x tokens x bytes per "
         "element (MLA caches one compressed latent per layer instead). Grouped-query attention, "
         "latent compression and narrower formats are the levers that move these lines down. "
         "Other architectures bend them: a sliding window stops the cache at the window, an SSM "
         "keeps a constant state per layer and no KV cache, and a hybrid caches K/V only in its "
         "few attention layers. The ring combo splits one sequence over several devices (ring "
         "attention): each keeps 1/P of the cache.";
}

void MemoryPanel::draw(AppState& state) {
  const auto& formats = kv_format_bytes();
  const int num_formats = static_cast<int>(formats.size());
  draw_format_picker();
  draw_measure_row(state);

  // Measured points are one sequence on one device: a ring's lines are not theirs.
  const std::vector<PlotSeries> measured =
      ring_ == 1 ? measured_series(state) : std::vector<PlotSeries>{};
  // Formula lines step back (thinner, dimmer, no markers) when measured points are shown.
  const bool has_measured = !measured.empty();
  std::vector<PlotSeries> series = formula_series(state, has_measured);
  series.insert(series.end(), measured.begin(), measured.end());  // drawn last: on top
  const Palette& pal = palette(state.presenter);
  const std::vector<PlotRefLine> gpus = {
      {.value = kH100Bytes, .label = "H100: 80 GB", .color = pal.warn, .label_below = true},
      {.value = kH200Bytes, .label = "H200: 141 GB", .color = pal.badge_demo}};
  PlotConfig cfg;
  cfg.id = "memory_vs_context";
  // Measured points of a small model (stories260K: 320 KiB at 512 tokens) widen the axes down.
  double x_lo = 1024.0, y_lo = 1024.0 * 1024.0;
  for (const PlotSeries& m : measured) {
    for (double x : m.x) x_lo = std::min(x_lo, std::exp2(std::floor(std::log2(x))));
    for (double y : m.y) y_lo = std::min(y_lo, std::exp2(std::floor(std::log2(y))));
  }
  cfg.x = PlotAxis{"context length (tokens)", AxisUnits::kTokens, true, x_lo, 1048576.0};
  const std::string y_label =
      ring_ == 1 ? std::string("KV cache per sequence")
                 : "KV cache per device (one sequence over " + std::to_string(ring_) + ")";
  cfg.y = PlotAxis{y_label, AxisUnits::kBytes, true, y_lo, 1024.0 * 1024 * 1024 * 1024};
  // The footer (what is shown) wraps: measure it at the panel's width.
  const std::string footer = shown_text(state, formats.size(), format_);
  const float wrap_w = ImGui::GetContentRegionAvail().x;
  const float footer_h = ImGui::CalcTextSize(footer.c_str(), nullptr, false, wrap_w).y +
                         ImGui::GetStyle().ItemSpacing.y;
  const float table_h = ImGui::GetTextLineHeightWithSpacing() * (shapes_.size() + 1.5f) +
                        ImGui::GetTextLineHeightWithSpacing() * 3.0f + footer_h;
  // Short panels (presenter mode) keep the plot and a one-line caption; the table needs room.
  const float avail = ImGui::GetContentRegionAvail().y;
  const bool with_table = avail - table_h >= ImGui::GetFontSize() * 14.0f;
  const float caption_h = footer_h + 2.0f;
  cfg.size = ImVec2(-1.0f, std::max(avail - (with_table ? table_h : caption_h), 120.0f));
  cfg.line_scale = state.presenter ? 1.6f : 1.0f;
  cfg.legend = true;
  const PlotResult r = plot(cfg, series, gpus);
  if (!r.exported.empty()) export_message_ = r.exported;
  if (with_table) {
    draw_table(state, formats[format_ == num_formats ? 0 : format_].bytes);
  } else {
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextDisabled("%s", footer.c_str());
    ImGui::PopTextWrapPos();
  }
}

void MemoryPanel::draw_format_picker() {
  const auto& formats = kv_format_bytes();
  const int num_formats = static_cast<int>(formats.size());
  static constexpr const char* kFormula =
      "KV bytes = 2 x layers x kv_heads x head_dim x tokens x bytes/elem;  "
      "MLA: layers x (512 + 64) x tokens x bytes/elem;  window: tokens <= window;  SSM: a "
      "constant state";
  // A short panel (presenter fonts, a small window) keeps its room for the plot: the formats in
  // a combo and the formula in a tooltip.
  const bool compact =
      ImGui::GetContentRegionAvail().y < ImGui::GetTextLineHeightWithSpacing() * 24.0f;
  if (compact) {
    ImGui::SetNextItemWidth(ImGui::CalcTextSize("fp8 / int8").x + ImGui::GetFrameHeight() * 2.0f);
    const char* shown = format_ < num_formats ? formats[format_].name : "all formats";
    if (ImGui::BeginCombo("##format", shown)) {
      for (int i = 0; i <= num_formats; ++i) {
        const char* name = i < num_formats ? formats[i].name : "all formats";
        if (ImGui::Selectable(name, format_ == i)) format_ = i;
      }
      ImGui::EndCombo();
    }
    item_tooltip("Bytes per KV element of the published shapes");
    flow_same_line(check_width("loaded run"), 12.0f);
    ImGui::Checkbox("loaded run", &show_loaded_);
    draw_ring_combo();
    flow_same_line(ImGui::CalcTextSize("formula").x, 12.0f);
    ImGui::TextDisabled("formula");
    item_tooltip(kFormula);
  } else {
    for (int i = 0; i <= num_formats; ++i) {
      const char* name = i < num_formats ? formats[i].name : "all formats";
      if (i > 0) flow_same_line(check_width(name), ImGui::GetStyle().ItemSpacing.x);
      ImGui::RadioButton(name, &format_, i);
    }
    flow_same_line(check_width("loaded run"), 16.0f);
    ImGui::Checkbox("loaded run", &show_loaded_);
    draw_ring_combo();
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextDisabled("%s", kFormula);
    ImGui::PopTextWrapPos();
  }
}

void MemoryPanel::draw_ring_combo() {
  static constexpr int kDevices[] = {1, 2, 4, 8, 16, 32, 64};
  const auto label = [](int devices) {
    return devices == 1 ? std::string("1 device") : "ring of " + std::to_string(devices);
  };
  const float w = ImGui::CalcTextSize("ring of 64").x + ImGui::GetFrameHeight() * 2.0f;
  flow_same_line(w, 12.0f);
  ImGui::SetNextItemWidth(w);
  if (ImGui::BeginCombo("##ring", label(ring_).c_str())) {
    for (int d : kDevices)
      if (ImGui::Selectable(label(d).c_str(), ring_ == d)) ring_ = d;
    ImGui::EndCombo();
  }
  item_tooltip(
      "Ring attention (sequence parallelism, Liu et al. 2023): one sequence cut into P chunks, "
      "one per device; at each layer the chunks' K and V pass round the ring, P - 1 steps. The "
      "lines become one device's share (the cache / P) and the table's contexts grow P times. "
      "Shown for the shapes whose whole cache grows with context (not the window, SSM or "
      "hybrid ones). kvscope memwall --ring P prints the bytes each step passes.");
}

bool MemoryPanel::drawn(const KvShape& shape) const {
  return ring_ == 1 || (shape.window == 0 && shape.state_values == 0.0);
}

std::vector<PlotSeries> MemoryPanel::formula_series(const AppState& state,
                                                    bool has_measured) const {
  const auto& formats = kv_format_bytes();
  const int num_formats = static_cast<int>(formats.size());
  std::vector<PlotSeries> series;
  for (int f = 0; f < num_formats; ++f) {
    if (format_ != num_formats && format_ != f) continue;
    const bool all = format_ == num_formats;
    for (std::size_t m = 0; m < shapes_.size(); ++m) {
      if (!drawn(shapes_[m])) continue;
      ImU32 col = series_color(static_cast<int>(m));
      if (all) col = mix_color(col, palette(state.presenter).panel_bg, 0.28f * f);
      if (has_measured) col = mix_color(col, palette(state.presenter).panel_bg, 0.35f);
      const std::string label = shapes_[m].name + (all ? std::string(" ") + formats[f].name : "");
      const KvShape& shape = shapes_[m];
      const double bpe = formats[f].bytes;
      const double p = ring_;
      series.push_back(curve(label, col, [&](double t) {
        return shape.bytes_at(std::ceil(t / p), bpe);  // the largest chunk
      }));
      series.back().markers = !all && !has_measured;
      series.back().in_legend = f == 0 || !all;  // all formats: one entry per shape (shades)
      if (has_measured) series.back().thickness = 1.5f;
      // The hybrid shape in fp16: its blocks as vLLM's hybrid manager lays them out, counted by
      // kvscope's own allocator (memory_shapes.h), on the formula's line.
      if (f == 0 && ring_ == 1 && shape.layers > 0 && shape.state_values > 0.0) {
        if (hybrid_points_.empty())
          hybrid_points_ = hybrid_allocator_points({1024, 4096, 16384, 65536, 262144, 1048576});
        PlotSeries dots;
        dots.label = shape.name + ": allocator";
        dots.color = series_color(static_cast<int>(m));
        dots.line = false;
        dots.markers = true;
        dots.marker_radius = 5.0f;
        dots.marker_outline = palette(state.presenter).text;
        for (const AllocatorPoint& point : hybrid_points_) {
          dots.x.push_back(point.tokens);
          dots.y.push_back(point.bytes);
        }
        series.push_back(std::move(dots));
      }
    }
  }
  if (show_loaded_ && state.header().kv_bytes_per_token > 0) {
    const double bpt = state.header().kv_bytes_per_token;
    const double p = ring_;
    series.push_back(curve(loaded_label(state), palette(state.presenter).text,
                           [bpt, p](double t) { return std::ceil(t / p) * bpt; }));
  }
  return series;
}

std::string MemoryPanel::shown_text(const AppState& state, std::size_t num_formats,
                                    int format) const {
  std::string text = "Lines: formulas for published shapes";
  if (static_cast<std::size_t>(format) == num_formats) text += " (paler: narrower formats)";
  if (show_loaded_ && state.header().kv_bytes_per_token > 0)
    text += state.is_demo() ? "; white: the loaded run's bytes per token (demo data)"
                            : "; white: the loaded run's bytes per token";
  if (ring_ == 1 && (format_ == 0 || static_cast<std::size_t>(format_) == num_formats))
    text +=
        "; ringed dots on the Jamba line: its blocks in fp16 as vLLM's hybrid manager lays "
        "them out, counted by kvscope's allocator (80-token attention pages, the 311,296-byte "
        "Mamba states padded to 327,680)";
  if (ring_ > 1)
    text += "; a ring of " + std::to_string(ring_) +
            " devices: each line is one device's share of one sequence (window, SSM and hybrid "
            "shapes left out), and measured points are hidden (one device's)";
  if (measured_ && !measured_->points.empty() && ring_ == 1) {
    text += "; ringed dots: measured " + model_display_name(measured_->model) + " " +
            measured_->format + " at " + std::to_string(measured_->points.size()) +
            " contexts (allocator bytes, OS-backed pages)";
    if (measured_->random_weights) text += ", random weights: bytes only";
    text += ".";
  } else {
    text += ", not measurements" +
            std::string(ring_ == 1 ? " (Measure runs the model to check them)." : ".");
  }
  return text;
}

void MemoryPanel::start_measurement(const AppState& state) {
  const std::shared_ptr<const RunInfo> info = state.source().run_info();
  if (!can_measure(info.get()) || job_.busy()) return;
  measured_.reset();
  cancelled_ = false;
  measured_for_ = info->model_source;
  job_.start(info->model, info->tokenizer, default_eval_text_path(),
             memory_job_contexts(info->shape.seq_len), info->config.k_format, info->config.v_format,
             info->config.block_size);
}

void MemoryPanel::draw_measure_row(const AppState& state) {
  if (std::shared_ptr<MemoryMeasurement> m = job_.take()) measured_ = std::move(m);
  const std::shared_ptr<const RunInfo> info = state.source().run_info();
  // The run moved to another model: its measurement is the old model's.
  if (info && !measured_for_.empty() && info->model_source != measured_for_) {
    job_.cancel();
    measured_.reset();
    measured_for_.clear();
  }
  const Palette& pal = palette(state.presenter);
  if (job_.busy()) {
    const float cancel_w = ImGui::CalcTextSize("Cancel").x +
                           ImGui::GetStyle().FramePadding.x * 2.0f +
                           ImGui::GetStyle().ItemSpacing.x;
    ImGui::ProgressBar(job_.fraction(), ImVec2(-cancel_w, 0),
                       "measuring: one sequence per context through the model");
    ImGui::SameLine();
    if (ImGui::Button("Cancel")) {
      job_.cancel();
      cancelled_ = true;
    }
    item_tooltip("Stop measuring (nothing is plotted)");
    return;
  }
  if (!can_measure(info.get())) {
    if (!measured_) return;  // nothing to offer; a measurement of this model stays shown
  } else {
    const std::vector<int> contexts = memory_job_contexts(info->shape.seq_len);
    if (ImGui::Button(measured_ ? "Measure again" : "Measure")) start_measurement(state);
    if (ImGui::IsItemHovered()) {
      ImGui::SetTooltip(
          "Run %s on %s tokens of text, each into a pool sized for it, and plot the KV bytes "
          "the allocator handed out and the pool's pages the OS backs, beside the formula "
          "(one CPU thread; about a minute for SmolLM2)",
          info->model_name.c_str(), contexts_text(contexts).c_str());
    }
    flow_same_line(0.0f, ImGui::GetStyle().ItemSpacing.x);
  }
  ImGui::PushTextWrapPos(0.0f);
  if (measured_ && !measured_->error.empty()) {
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(pal.warn), "measuring failed: %s",
                       measured_->error.c_str());
  } else if (measured_ && !measured_->points.empty()) {
    const KvMemoryPoint& p = measured_->points.back();
    ImGui::TextDisabled(
        "measured%s: %s at %s tokens (formula %s); the OS backs %s",
        measured_->random_weights ? " [random weights: bytes only]" : "",
        format_bytes(p.allocated_bytes).c_str(), format_tick(p.tokens, AxisUnits::kTokens).c_str(),
        format_bytes(p.formula_bytes).c_str(),
        p.resident_bytes >= 0 ? format_bytes(static_cast<double>(p.resident_bytes)).c_str()
                              : "an unknown amount");
  } else if (cancelled_) {
    ImGui::TextDisabled("measuring cancelled");
  } else {
    ImGui::TextDisabled("formulas; Measure runs the model to check them");
  }
  ImGui::PopTextWrapPos();
}

std::vector<PlotSeries> MemoryPanel::measured_series(const AppState& state) const {
  std::vector<PlotSeries> out;
  if (!measured_ || measured_->points.empty()) return out;
  const Palette& pal = palette(state.presenter);
  const std::string name = model_display_name(measured_->model);
  PlotSeries allocated, resident;
  allocated.label = "measured " + name + " " + measured_->format + ": allocator";
  resident.label = "measured: OS pages";
  allocated.color = pal.accent;
  resident.color = pal.warn;
  for (PlotSeries* s : {&allocated, &resident}) {
    s->line = false;
    s->markers = true;
    s->marker_radius = 5.0f;
    s->marker_outline = pal.text;
  }
  for (const KvMemoryPoint& p : measured_->points) {
    allocated.x.push_back(p.tokens);
    allocated.y.push_back(p.allocated_bytes);
    if (p.resident_bytes >= 0) {
      resident.x.push_back(p.tokens);
      resident.y.push_back(static_cast<double>(p.resident_bytes));
    }
  }
  out.push_back(std::move(allocated));
  if (!resident.x.empty()) out.push_back(std::move(resident));
  return out;
}

// One ring step of a 128K-token sequence over the ring (engine/analysis/memory_math.h, the same
// arithmetic as kvscope memwall --ring): the chunk of one layer that passes to the next device,
// and whether an H100's attention on the visiting chunk hides it over NVLink 4.
std::optional<MemoryPanel::RingStep> MemoryPanel::ring_step(const KvShape& shape,
                                                            double bytes_per_token) const {
  if (ring_ < 2 || shape.heads <= 0 || shape.layers <= 0 || bytes_per_token <= 0.0)
    return std::nullopt;
  RingStep r;
  r.split = ring_split(bytes_per_token, shape.layers, kRingTokens, ring_);
  r.timing = ring_timing(r.split, shape.heads, shape.head_dim, kRingFlops,
                         link_presets()[1].bytes_per_second);
  return r;
}

std::string MemoryPanel::ring_step_text(const RingStep& r) {
  return format_bytes(r.split.step_bytes) +
         (r.timing.hidden() ? ", hidden"
                            : ", " + format_time(r.timing.exposed_seconds) + " exposed");
}

std::string MemoryPanel::ring_step_text(const KvShape& shape, double bytes_per_token) const {
  const std::optional<RingStep> r = ring_step(shape, bytes_per_token);
  return r ? ring_step_text(*r) : "-";
}

void MemoryPanel::draw_ring_step(const KvShape& shape, double bytes_per_token) const {
  ImGui::TableNextColumn();
  const std::optional<RingStep> r = ring_step(shape, bytes_per_token);
  if (!r) {
    ImGui::TextDisabled("-");
    return;
  }
  const Link& nvlink = link_presets()[1];
  const RingSplit& split = r->split;
  const RingTiming& t = r->timing;
  const std::string text = ring_step_text(*r);
  ImGui::TextUnformatted(text.c_str());
  if (ImGui::IsItemHovered()) {
    ImGui::SetTooltip(
        "128K tokens over %d devices: %lld a device. At each of the %d steps of a layer a device "
        "passes one layer of its chunk's K/V (%s) to the next, over %s (%.0f GB/s: %s), while it "
        "attends its queries to the chunk visiting it (%s at %.0f TFLOPS, an H100's dense bf16). "
        "%s Chunks of %.0f tokens or more hide the transfer. kvscope memwall --ring %d prints the "
        "same arithmetic.",
        ring_, static_cast<long long>(split.chunk_tokens), split.steps_per_layer,
        format_bytes(split.step_bytes).c_str(), nvlink.name.c_str(), nvlink.bytes_per_second / 1e9,
        format_time(t.transfer_seconds).c_str(), format_time(t.compute_seconds).c_str(),
        kRingFlops / 1e12,
        t.hidden() ? "The transfer hides behind the compute."
                   : "The transfer outlasts the compute.",
        t.min_chunk_tokens, ring_);
  }
}

void MemoryPanel::draw_table(const AppState& state, double bytes_per_element) {
  const ImGuiTableFlags flags =
      ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp | ImGuiTableFlags_BordersInnerV;
  const bool ring = ring_ > 1;
  if (ImGui::BeginTable("##shapes", ring ? 5 : 4, flags)) {
    ImGui::TableSetupColumn("published shape (formula)", ImGuiTableColumnFlags_WidthStretch, 1.6f);
    ImGui::TableSetupColumn("KV / token (+ state)", ImGuiTableColumnFlags_WidthStretch, 1.0f);
    const std::string gpus = ring ? " x " + std::to_string(ring_) : "";
    ImGui::TableSetupColumn(("max ctx, 80 GB" + gpus).c_str(), ImGuiTableColumnFlags_WidthStretch,
                            1.0f);
    ImGui::TableSetupColumn(("max ctx, 141 GB" + gpus).c_str(), ImGuiTableColumnFlags_WidthStretch,
                            1.0f);
    if (ring) ImGui::TableSetupColumn("ring step, 128K", ImGuiTableColumnFlags_WidthStretch, 1.2f);
    ImGui::TableHeadersRow();
    for (std::size_t m = 0; m < shapes_.size(); ++m) {
      const KvShape& shape = shapes_[m];
      if (!drawn(shape)) continue;
      const double bpt = shape.bytes_per_token(bytes_per_element);
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      swatch(series_color(static_cast<int>(m)));
      ImGui::SameLine(0, 4);
      ImGui::TextUnformatted(shape.name.c_str());
      if (ImGui::IsItemHovered()) {
        const std::string from =
            shape.preset.empty() ? shape.source : "synthetic preset " + shape.preset;
        ImGui::SetTooltip("%s: %s at %.1f bytes per KV element = %.0f bytes per token%s (%s)",
                          shape.name.c_str(), shape.dims().c_str(), bytes_per_element, bpt,
                          shape.state_values > 0 ? ", states in 16 bits" : "", from.c_str());
      }
      ImGui::TableNextColumn();
      std::string per_token = format_bytes(bpt);
      if (shape.window > 0) per_token += " to " + format_tick(shape.window, AxisUnits::kTokens);
      if (shape.state_values > 0) per_token += " + " + format_bytes(shape.state_bytes());
      ImGui::TextUnformatted(per_token.c_str());
      ImGui::TableNextColumn();
      // On a ring each device holds 1/P of the sequence: P devices' memory for one sequence.
      ImGui::TextUnformatted(
          context_text(max_context_tokens(kH100Bytes * ring_, shape, bytes_per_element)).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(
          context_text(max_context_tokens(kH200Bytes * ring_, shape, bytes_per_element)).c_str());
      if (ring) draw_ring_step(shape, bpt);
    }
    ImGui::EndTable();
  }
  ImGui::PushTextWrapPos(0.0f);
  ImGui::TextDisabled(
      "%s Table: formulas at %.1f bytes/element (scales excluded; SSM states in 16 bits); "
      "synthetic models with the first four shapes run on random weights, the window, SSM and "
      "hybrid ones are formulas only. Max context assumes the whole GPU (on a ring, each of the "
      "ring's GPUs) holds one sequence's cache (weights not subtracted).%s",
      shown_text(state, kv_format_bytes().size(), format_).c_str(), bytes_per_element,
      export_message_.empty() ? "" : ("  " + export_message_).c_str());
  ImGui::PopTextWrapPos();
}

}  // namespace kvscope::ui

// Compare panel: variant session management, the difference table and overlaid plots.
#include "app/panels/compare_panel.h"

#include <algorithm>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "app/core/request_text.h"
#include "app/core/shell_layout.h"
#include "app/core/theme.h"
#include "app/widgets/plot.h"
#include "app/widgets/widgets.h"

namespace kvscope::ui {

namespace {

// Prefill tokens computed over steps [0, step].
double cumulative_prefill(std::span<const StepMetrics> m, int step) {
  double sum = 0.0;
  for (int i = 0; i <= step && i < static_cast<int>(m.size()); ++i)
    sum += static_cast<double>(m[static_cast<std::size_t>(i)].prefill_tokens);
  return sum;
}

// Mean decode tokens per step over steps [0, step].
double mean_decode(std::span<const StepMetrics> m, int step) {
  if (m.empty()) return 0.0;
  step = std::clamp(step, 0, static_cast<int>(m.size()) - 1);
  double sum = 0.0;
  for (int i = 0; i <= step; ++i)
    sum += static_cast<double>(m[static_cast<std::size_t>(i)].decode_tokens);
  return sum / (step + 1);
}

constexpr std::size_t kMaxTokensShown = 400;  // per request and run: the newest ones

std::string printable(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

// Draws generated tokens `ids` decoded (token ids without a tokenizer), wrapped to the column:
// the first `common` in `same`, the rest in `differ`. `prev` is the token before the first.
void draw_tokens(const Tokenizer* tok, int prev, std::span<const int> ids, std::size_t common,
                 ImU32 same, ImU32 differ) {
  const float avail = ImGui::GetContentRegionAvail().x;
  const std::size_t first = ids.size() > kMaxTokensShown ? ids.size() - kMaxTokensShown : 0;
  if (first > 0) prev = ids[first - 1];
  float x = 0.0f;
  bool line_start = true;
  if (first > 0) {
    ImGui::TextDisabled("...");
    x = ImGui::GetItemRectSize().x;
    line_start = false;
  }
  for (std::size_t k = first; k < ids.size(); ++k) {
    const int id = ids[k];
    if (id < 0) continue;
    const std::string piece = tok != nullptr ? printable(tok->decode(prev, id)) : token_id_text(id);
    prev = id;
    if (piece.empty()) continue;
    const float w = ImGui::CalcTextSize(piece.c_str()).x;
    if (!line_start && x + w <= avail) {
      ImGui::SameLine(0.0f, 0.0f);
    } else {
      x = 0.0f;
    }
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(k < common ? same : differ), "%s",
                       piece.c_str());
    x += w;
    line_start = false;
  }
  if (ids.empty()) ImGui::TextDisabled("(nothing generated yet)");
}

}  // namespace

std::string ComparePanel::help() const {
  return "Two policies on the same requests and seed, step by step: every difference in the "
         "table comes from the policy alone. Set the variant in the Controls panel (target: "
         "compare variant); throughput is counted per scheduler step, not per second. The Text "
         "tab sets each request's generated text side by side, from the first token that differs "
         "in the warning colour: what eviction, a narrower KV format or a low MLA rank changes in "
         "the model's answer.";
}

void ComparePanel::sync(AppState& state) {
  const std::shared_ptr<const RunInfo> info = state.source().run_info();
  if (!info) {
    variant_.reset();
    return;
  }
  if (state.compare_variant_version == 0) {
    // Nobody chose a variant yet: the most telling contrast for this scenario.
    PolicyOverride v;
    if (info->variants.size() > 1 && info->override.variant.empty())
      v.variant = info->variants[1];  // the scenario's own first compare variant
    else if (info->config.prefix_caching)
      v.prefix_caching = false;
    else if (info->config.allocator == AllocatorKind::kPaged)
      v.allocator = AllocatorKind::kContiguous;
    else
      v.allocator = AllocatorKind::kPaged;
    state.compare_variant = v;
    state.compare_variant_version = 1;
  }
  if (generation_ == state.source_generation() && version_ == state.compare_variant_version) return;
  generation_ = state.source_generation();
  version_ = state.compare_variant_version;
  variant_.reset();  // stops the previous variant's worker
  error_.clear();
  // The variant runs on the run's model and backend (the Controls panel's model picker and
  // backend set both), so every difference comes from the policy.
  PolicyOverride variant = state.compare_variant;
  variant.backend = info->override.backend;
  if (variant == info->override) return;  // same policy: nothing to compare
  try {
    variant_ = RunSession::open(info->scenario_path, info->model == nullptr, variant,
                                info->model_override);
    ++variant_serial_;
  } catch (const std::exception& e) {
    error_ = e.what();
  }
}

void ComparePanel::draw_table(const AppState& state, const StepMetrics& a, const StepMetrics& b,
                              int step_b) {
  const Palette& pal = palette(state.presenter);
  const ImGuiTableFlags flags =
      ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_SizingFixedFit |
      ImGuiTableFlags_NoHostExtendX;  // as wide as its columns: plots may go beside it
  if (!ImGui::BeginTable("##diff", 4, flags)) return;
  ImGui::TableSetupColumn("at the selected step");
  ImGui::TableSetupColumn("current");
  ImGui::TableSetupColumn("variant");
  ImGui::TableSetupColumn("variant - current");
  ImGui::TableHeadersRow();
  // better: +1 when higher is better, -1 when lower is better, 0 neutral.
  const auto row = [&](const char* name, double va, double vb, int better, bool percent,
                       const char* tip) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(name);
    item_tooltip(tip);
    const auto fmt = [percent](double v) {
      char buf[32];
      if (percent) return format_percent(v);
      std::snprintf(buf, sizeof buf, v == static_cast<long long>(v) ? "%.0f" : "%.2f", v);
      return std::string(buf);
    };
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(fmt(va).c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(fmt(vb).c_str());
    ImGui::TableNextColumn();
    const double d = vb - va;
    ImU32 col = pal.text_dim;
    if (better != 0 && d != 0.0)
      col = (d > 0) == (better > 0) ? IM_COL32(110, 200, 140, 255) : pal.warn;
    char buf[48];
    if (percent)
      std::snprintf(buf, sizeof buf, "%+.1f pts", 100.0 * d);
    else
      std::snprintf(buf, sizeof buf, d == static_cast<long long>(d) ? "%+.0f" : "%+.2f", d);
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(col), "%s", d == 0.0 ? "=" : buf);
  };
  const auto frac = [](std::int64_t n, std::int64_t d) {
    return d > 0 ? static_cast<double>(n) / static_cast<double>(d) : 0.0;
  };
  row("blocks in use", a.blocks_used, b.blocks_used, 0, false, "Blocks referenced by a sequence");
  row("pool size (blocks)", a.blocks_total, b.blocks_total, 0, false,
      "The pool in blocks (a smaller KV format fits more blocks in the same bytes)");
  row("KV MiB in use", static_cast<double>(a.kv_bytes_used) / (1024.0 * 1024.0),
      static_cast<double>(b.kv_bytes_used) / (1024.0 * 1024.0), -1, false,
      "Allocated token slots x exact bytes per token (blocks of the two runs may differ in "
      "size: a block size, a K/V format or a hybrid model's layer groups)");
  row("utilization", a.utilization(), b.utilization(), +1, true,
      "Token slots holding a token / token slots allocated");
  row("internal fragmentation (slots)", static_cast<double>(a.internal_frag_slots),
      static_cast<double>(b.internal_frag_slots), -1, false,
      "Empty slots in the partly filled last block of each sequence");
  row("reservation waste (slots)", static_cast<double>(a.reservation_waste_slots),
      static_cast<double>(b.reservation_waste_slots), -1, false,
      "Contiguous allocator: slots reserved beyond the last used block");
  // External fragmentation costs only an allocator that needs a run of free blocks (the
  // contiguous one); a paged pool serves any free block, so between two paged runs it is neither
  // better nor worse and is not coloured.
  const std::shared_ptr<const RunInfo> info_b = variant_->run_info();
  const std::shared_ptr<const RunInfo> info_a = state.source().run_info();
  const bool any_contiguous = (info_a && info_a->config.allocator == AllocatorKind::kContiguous) ||
                              (info_b && info_b->config.allocator == AllocatorKind::kContiguous);
  row("external fragmentation", a.external_fragmentation(), b.external_fragmentation(),
      any_contiguous ? -1 : 0, true,
      any_contiguous ? "1 - largest free run / free blocks: the contiguous allocator needs a run "
                       "of free blocks, so scattered free blocks can leave a request waiting"
                     : "1 - largest free run / free blocks. Both runs are paged: any free block "
                       "serves, so this costs nothing here (only a contiguous allocator pays)");
  row("running requests", a.requests_running, b.requests_running, +1, false,
      "Requests decoding or prefilling in this step");
  row("finished requests", a.requests_finished, b.requests_finished, +1, false,
      "Requests done by this step");
  row("preemptions", static_cast<double>(a.preemptions), static_cast<double>(b.preemptions), -1,
      false, "Cumulative preemptions (recompute or swap)");
  row("tokens recomputed", static_cast<double>(a.tokens_recomputed),
      static_cast<double>(b.tokens_recomputed), -1, false,
      "Cumulative tokens prefilled again after a recompute preemption");
  row("prefix hit rate", frac(a.prefix_hit_tokens, a.prompt_tokens),
      frac(b.prefix_hit_tokens, b.prompt_tokens), +1, true,
      "Prompt tokens served from the prefix cache / prompt tokens admitted");
  row("prefill tokens computed", cumulative_prefill(state.metrics_history(), state.step()),
      cumulative_prefill(variant_->timeline()->all_metrics(), step_b), -1, false,
      "Prompt tokens run through the model so far (prefix hits skip theirs; recompute adds)");
  row("decode tokens per step", mean_decode(state.metrics_history(), state.step()),
      mean_decode(variant_->timeline()->all_metrics(), step_b), +1, false,
      "Tokens generated per scheduler step, averaged up to this step (the timeline records "
      "steps, not wall time)");
  if (!state.is_live() && !variant_->is_running()) {
    row("steps to finish the run", state.num_steps(),
        static_cast<double>(variant_->timeline()->num_steps()), -1, false,
        "Scheduler steps until every request finished (both runs complete)");
  }
  ImGui::EndTable();
}

void ComparePanel::draw_plots(const AppState& state) {
  const std::span<const StepMetrics> ma = state.metrics_history();
  const std::span<const StepMetrics> mb = variant_->timeline()->all_metrics();
  PlotSeries ua, ub, ba, bb;
  ua.label = ba.label = "current";
  ub.label = bb.label = "variant";
  ua.color = ba.color = series_color(0);
  ub.color = bb.color = series_color(1);
  for (const StepMetrics& m : ma) {
    ua.x.push_back(m.step);
    ua.y.push_back(m.utilization());
    ba.x.push_back(m.step);
    ba.y.push_back(m.blocks_used);
  }
  for (const StepMetrics& m : mb) {
    ub.x.push_back(m.step);
    ub.y.push_back(m.utilization());
    bb.x.push_back(m.step);
    bb.y.push_back(m.blocks_used);
  }
  // Both plots side by side under the table when they get a legible size there; else one plot
  // (picked by two radio buttons) beside the table; else neither, saying so.
  const float gap = ImGui::GetStyle().ItemSpacing.x;
  const float min_h =
      kMinPlotLines * ImGui::GetTextLineHeight() + ImGui::GetFrameHeightWithSpacing();
  const float min_w = kMinPlotEms * ImGui::GetFontSize();
  const ImVec2 table_min = ImGui::GetItemRectMin(), table_max = ImGui::GetItemRectMax();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float content_right = ImGui::GetWindowContentRegionMax().x + ImGui::GetWindowPos().x;
  const float beside_w = content_right - table_max.x - gap * 2.0f;
  PlotConfig c;
  c.cursor_x = state.step();
  c.line_scale = state.presenter ? 1.6f : 1.0f;
  c.x = {"step", AxisUnits::kNumber, false, {}, {}};
  const PlotSeries u[] = {ua, ub};
  const PlotSeries b[] = {ba, bb};
  const auto utilization = [&] {
    c.id = "cmp_util";
    c.title = "utilization";
    c.y = {"filled / allocated", AxisUnits::kPercent, false, 0.0, 1.0};
    plot(c, u);
  };
  const auto blocks = [&] {
    c.id = "cmp_blocks";
    c.title = "blocks in use";
    c.y = {"blocks", AxisUnits::kNumber, false, {}, {}};
    plot(c, b);
  };
  if (avail.y >= min_h && (avail.x - gap) * 0.5f >= min_w) {
    c.size = ImVec2((avail.x - gap) * 0.5f, avail.y);
    utilization();
    ImGui::SameLine();
    blocks();
    return;
  }
  const float bottom = ImGui::GetCursorScreenPos().y + avail.y;
  if (beside_w >= min_w && bottom - table_min.y >= min_h) {
    ImGui::SetCursorScreenPos(ImVec2(table_max.x + gap * 2.0f, table_min.y));
    ImGui::BeginGroup();
    ImGui::RadioButton("utilization", &single_plot_, 0);
    ImGui::SameLine();
    ImGui::RadioButton("blocks in use", &single_plot_, 1);
    c.size = ImVec2(beside_w, bottom - ImGui::GetCursorScreenPos().y);
    if (single_plot_ == 0)
      utilization();
    else
      blocks();
    ImGui::EndGroup();
    return;
  }
  ImGui::TextDisabled("(the plots need a larger panel)");
}

void ComparePanel::draw(AppState& state) {
  sync(state);
  const std::shared_ptr<const RunInfo> info = state.source().run_info();
  if (!info) {
    ImGui::TextDisabled("compare needs a scenario run (recordings and demo data cannot re-run)");
    return;
  }
  if (variant_) {
    if (std::optional<std::string> e = variant_->take_error()) error_ = *e;
  }
  const Palette& pal = palette(state.presenter);
  ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(series_color(0)), "current:");
  ImGui::SameLine();
  ImGui::TextUnformatted(info->override.describe().c_str());
  ImGui::SameLine(0, 18);
  ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(series_color(1)), "variant:");
  ImGui::SameLine();
  ImGui::TextUnformatted(state.compare_variant.describe().c_str());
  if (!error_.empty()) {
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(pal.warn), "variant: %s", error_.c_str());
    ImGui::PopTextWrapPos();
  }
  if (!variant_) {
    if (error_.empty()) {
      ImGui::PushTextWrapPos(0.0f);
      ImGui::TextDisabled(
          "The variant has the same policy as this run. In the Controls panel, "
          "pick target \"compare variant\" and change a setting.");
      ImGui::PopTextWrapPos();
    }
    return;
  }
  const std::span<const StepMetrics> mb = variant_->timeline()->all_metrics();
  if (mb.empty()) return;
  const int step_b = std::min(state.step(), static_cast<int>(mb.size()) - 1);
  const bool b_done = !variant_->is_running();
  ImGui::TextDisabled("step %d; variant %s %d steps%s", state.step(),
                      b_done ? "finished in" : "computing,", static_cast<int>(mb.size()),
                      step_b < state.step() ? " (shown at its last step)" : "");
  // A caption's compare_tab opens its tab once.
  const std::optional<int> tab = state.compare_tab;
  state.compare_tab.reset();
  const auto flags_for = [&tab](int t) {
    return tab == t ? ImGuiTabItemFlags_SetSelected : ImGuiTabItemFlags_None;
  };
  if (!ImGui::BeginTabBar("##compare_views")) return;
  if (ImGui::BeginTabItem("Memory", nullptr, flags_for(0))) {
    draw_table(state, state.metrics(), mb[static_cast<std::size_t>(step_b)], step_b);
    draw_plots(state);
    ImGui::EndTabItem();
  }
  if (ImGui::BeginTabItem("Text", nullptr, flags_for(1))) {
    draw_text(state, step_b);
    ImGui::EndTabItem();
  }
  ImGui::EndTabBar();
}

void ComparePanel::draw_text(const AppState& state, int step_b) {
  const DataSource& src = state.source();
  text_a_.catch_up(state.source_generation(), state.step(),
                   [&src](int s) { return src.events_at(s); });
  const std::shared_ptr<const Timeline> tb = variant_->timeline();
  text_b_.catch_up(variant_serial_, step_b, [&tb](int s) { return tb->events_at(s); });
  std::vector<int> ids;
  for (const auto& [id, t] : text_a_.tokens()) ids.push_back(id);
  for (const auto& [id, t] : text_b_.tokens()) {
    if (!text_a_.tokens().contains(id)) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  const std::vector<int> none;
  const auto tokens_of = [&none](const GeneratedTokens& g, int id) -> const std::vector<int>& {
    const auto it = g.tokens().find(id);
    return it != g.tokens().end() ? it->second : none;
  };
  int same = 0;
  for (const int id : ids)
    same += compare_tokens(tokens_of(text_a_, id), tokens_of(text_b_, id)).same;
  const Palette& pal = palette(state.presenter);
  if (ids.empty()) {
    ImGui::TextDisabled("no request has generated a token by step %d", state.step());
    return;
  }
  ImGui::TextDisabled("%d of %zu requests say the same so far (compared where both have a token)",
                      same, ids.size());
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV |
                                ImGuiTableFlags_BordersInnerH | ImGuiTableFlags_ScrollY |
                                ImGuiTableFlags_SizingStretchProp;
  if (!ImGui::BeginTable("##compare_text", 3, flags)) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("request", ImGuiTableColumnFlags_WidthFixed,
                          ImGui::CalcTextSize("differs at token 0000").x);
  ImGui::TableSetupColumn("current", ImGuiTableColumnFlags_WidthStretch, 1.0f);
  ImGui::TableSetupColumn("variant", ImGuiTableColumnFlags_WidthStretch, 1.0f);
  ImGui::TableHeadersRow();
  for (const int id : ids) {
    const std::vector<int>& a = tokens_of(text_a_, id);
    const std::vector<int>& b = tokens_of(text_b_, id);
    const TokenAgreement ag = compare_tokens(a, b);
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(sequence_color(id)), "seq %d", id);
    if (ag.same) {
      ImGui::TextDisabled("same so far");
    } else {
      ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(pal.warn), "differs at token %zu",
                         ag.common + 1);
    }
    // The token before the first generated one: the prompt's last (a tokenizer decodes a piece
    // after the one before it).
    const std::span<const int> prompt = src.prompt_tokens(id);
    const int prev = prompt.empty() ? 1 : prompt.back();
    ImGui::TableNextColumn();
    draw_tokens(src.tokenizer(), prev, a, ag.common, pal.text, pal.text);
    ImGui::TableNextColumn();
    draw_tokens(variant_->tokenizer(), prev, b, ag.common, pal.text, pal.warn);
  }
  ImGui::EndTable();
}

}  // namespace kvscope::ui

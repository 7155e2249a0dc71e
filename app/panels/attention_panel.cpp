// Attention heatmap panel: capture bookkeeping, the matrix and the cumulative view.
#include "app/panels/attention_panel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "app/core/run_info.h"
#include "app/core/theme.h"
#include "app/widgets/widgets.h"
#include "engine/kv/event_payloads.h"

namespace kvscope::ui {

ImU32 attention_heat_color(float t, ImU32 bg) {
  t = std::clamp(t, 0.0f, 1.0f);
  const ImU32 mid = IM_COL32(60, 130, 220, 255), hot = IM_COL32(255, 214, 90, 255);
  return t < 0.5f ? mix_color(bg, mid, t * 2.0f) : mix_color(mid, hot, (t - 0.5f) * 2.0f);
}

namespace {

constexpr float kLogFloor = 1e-4f;  // log scale: weights below this draw as background

// A key the selection skipped: a faint blue-grey, unlike an evicted key's grey.
ImU32 not_picked_color(const Palette& pal) {
  return mix_color(pal.block_free, IM_COL32(90, 110, 150, 255), 0.3f);
}

// Whether a run has a whole cache to select keys from (no token eviction, no latent cache).
bool selectable(const SimConfig& config) {
  return !config.evicts_tokens() && !config.mla;
}

// The "keys" combo's label of a selection.
std::string selection_label(const std::optional<SparseOptions>& s) {
  if (!s) return "all (dense)";
  return std::string(selector_kind_name(s->selector)) + " top-" + std::to_string(s->topk);
}

}  // namespace

std::optional<SparseOptions> AttentionPanel::shown_selection(const SimConfig& config) const {
  if (config.sparse_attention) return config.sparse_attention;
  return selectable(config) ? selection_ : std::nullopt;
}

void AttentionPanel::draw_selection_combo(const RunInfo& info) {
  const float w = ImGui::GetFontSize() * 7.5f;
  flow_same_line(labeled_width(w, "keys"), ImGui::GetStyle().ItemSpacing.x);
  const bool own = info.config.sparse_attention.has_value();  // the run's own selection
  const bool can = selectable(info.config) && !own;
  ImGui::BeginDisabled(!can);
  ImGui::SetNextItemWidth(w);
  if (ImGui::BeginCombo("keys", selection_label(shown_selection(info.config)).c_str())) {
    std::vector<std::optional<SparseOptions>> choices = {std::nullopt};
    const int bs = info.config.block_size, hd = info.shape.head_dim();
    for (SelectorKind kind : {SelectorKind::kOracle, SelectorKind::kQuest, SelectorKind::kSparq}) {
      for (int k : {16, 32, 64}) {
        if (kind == SelectorKind::kQuest && k < bs) continue;  // whole blocks: k >= block size
        SparseOptions o;
        o.selector = kind;
        o.topk = k;
        o.proxy_dims = std::max(1, hd / 4);
        choices.push_back(o);
      }
    }
    for (const std::optional<SparseOptions>& c : choices) {
      if (ImGui::Selectable(selection_label(c).c_str(), c == selection_)) selection_ = c;
    }
    ImGui::EndCombo();
  }
  ImGui::EndDisabled();
  item_tooltip(own   ? "This run attends sparsely itself (its scenario's cache.sparse_attention): "
                       "the heatmap shows the keys each of its queries picked"
               : can ? "Sparse attention: each query head attends only to k keys a selector picks "
                       "from the whole cache (oracle: the true top-k; quest: whole blocks by "
                       "their min/max bound; sparq: q.k over the query's largest channels). "
                       "Keys not picked stay cached (kvscope eval sparse measures the quality)"
                     : "This run evicts tokens or caches MLA latents: there is no whole cache to "
                       "select keys from");
}

std::string AttentionPanel::help() const {
  return "Attention weights say how much each new token (a query, one row) reads from every "
         "earlier token's cached key (a column); each row sums to 1. Columns that draw attention "
         "from every query are sinks, which eviction policies must keep.";
}

std::string AttentionPanel::shown_title(const AppState& state) const {
  const std::shared_ptr<const RunInfo> info = state.source().run_info();
  if (!info || !info->model) return title();
  return std::string(title()) + ": " + info->model_name;
}

void AttentionPanel::scan_tokens(const AppState& state) {
  if (generation_ != state.source_generation()) {
    job_.cancel();
    generation_ = state.source_generation();
    scanned_until_ = -1;
    generated_.clear();
    sampled_step_.clear();
    fed_.clear();
    captures_.clear();
    view_of_ = nullptr;
    grid_of_.reset();
    last_error_.clear();
  }
  const int last = state.num_steps() - 1;
  for (int s = scanned_until_ + 1; s <= last; ++s) {
    for (const Event& e : state.source().events_at(s)) {
      if (e.type == EventType::kPrefillChunk) {
        const auto c = event_as<ev::PrefillChunk>(e);
        if (c.first_position >= 0 && c.tokens >= 0 && c.first_position + c.tokens < (1 << 24))
          fed_[e.request].emplace_back(s, static_cast<int>(c.first_position + c.tokens));
      }
      if (e.type != EventType::kDecodeToken) continue;
      const auto d = event_as<ev::DecodeToken>(e);
      if (d.position < 0 || d.position >= (1 << 24)) continue;
      fed_[e.request].emplace_back(s, static_cast<int>(d.position + 1));
      const auto pos = static_cast<std::size_t>(d.position + 1);  // where the sampled token goes
      std::vector<int>& t = generated_[e.request];
      std::vector<int>& st = sampled_step_[e.request];
      if (t.size() <= pos) {
        t.resize(pos + 1, -1);
        st.resize(pos + 1, -1);
      }
      t[pos] = static_cast<int>(d.token);
      st[pos] = s;
    }
  }
  scanned_until_ = std::max(scanned_until_, last);
}

int AttentionPanel::pick_request(const AppState& state) const {
  if (state.selected_request) return *state.selected_request;
  for (const RequestState& r : state.pool().requests)
    if (r.phase == RequestPhase::kRunning) return r.id;
  return state.pool().requests.empty() ? -1 : state.pool().requests.front().id;
}

int AttentionPanel::shown_positions(const AppState& state, int request) const {
  const RequestState* r = find_request(state.pool(), request);
  if (r == nullptr || r->phase == RequestPhase::kWaiting || r->phase == RequestPhase::kRejected)
    return 0;
  if (r->phase == RequestPhase::kRunning &&
      !state.source().slot_live(request, state.step()).empty()) {
    // Token eviction: the queries ran over every token fed so far, not just the cached ones.
    int fed = 0;
    if (const auto it = fed_.find(request); it != fed_.end()) {
      for (const auto& [step, n] : it->second) {
        if (step > state.step()) break;
        fed = n;
      }
    }
    return fed;
  }
  if (r->phase == RequestPhase::kRunning && r->num_tokens > 0) return r->num_tokens;
  // Finished or swapped: every token fed so far (the newest sampled one is not fed yet).
  int n = static_cast<int>(state.source().prompt_tokens(request).size());
  const auto it = sampled_step_.find(request);
  int sampled = 0;
  if (it != sampled_step_.end()) {
    for (std::size_t p = static_cast<std::size_t>(n); p < it->second.size(); ++p) {
      if (it->second[p] < 0 || it->second[p] > state.step()) break;
      ++sampled;
    }
  }
  return n + std::max(0, sampled - 1);
}

std::string AttentionPanel::token_text(const AppState& state, const AttentionCapture& cap,
                                       int pos) const {
  const Tokenizer* tok = state.source().tokenizer();
  if (pos < 0 || pos >= static_cast<int>(cap.tokens.size())) return {};
  const int id = cap.tokens[static_cast<std::size_t>(pos)];
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%d", id);
  if (tok == nullptr) return buf;
  const int prev = pos == 0 ? 1 : cap.tokens[static_cast<std::size_t>(pos) - 1];
  std::string s;
  if (pos == 0 && id == 1)
    s = "<s>";
  else
    s = tok->decode(prev, id);
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

void AttentionPanel::build_view(const AttentionCapture& cap, int n) {
  if (view_of_ == &cap && view_layer_ == layer_ && view_head_ == head_ && view_n_ == n &&
      view_mean_ == mean_heads_)
    return;
  view_of_ = &cap;
  view_layer_ = layer_;
  view_head_ = head_;
  view_n_ = n;
  view_mean_ = mean_heads_;
  const AttentionRecorder& rec = *cap.recorder;
  const int h0 = mean_heads_ ? 0 : head_, h1 = mean_heads_ ? cap.n_heads : head_ + 1;
  const float inv = 1.0f / static_cast<float>(h1 - h0);
  const auto un = static_cast<std::size_t>(n);
  if (n <= kMatrixLimit && rec.has_full_matrices()) {
    view_.assign(un * un, 0.0f);
    for (int h = h0; h < h1; ++h)
      for (int q = 0; q < n; ++q)
        for (int k = 0; k <= q; ++k)
          view_[static_cast<std::size_t>(q) * un + static_cast<std::size_t>(k)] +=
              rec.weight(layer_, h, q, k) * inv;
  } else {
    view_.assign(un, 0.0f);
    for (int h = h0; h < h1; ++h) {
      for (int k = 0; k < n; ++k) {
        float sum = 0.0f;
        if (rec.has_full_matrices()) {
          for (int q = k; q < n; ++q) sum += rec.weight(layer_, h, q, k);
        } else {
          sum = rec.cumulative(layer_, h, k);
        }
        view_[static_cast<std::size_t>(k)] += sum * inv;
      }
    }
  }
  sinks_.clear();
  for (const SinkReport& s : cap.sinks) {
    if (s.layer != layer_ || (!mean_heads_ && s.head != head_) || s.position >= n) continue;
    if (std::find(sinks_.begin(), sinks_.end(), s.position) == sinks_.end())
      sinks_.push_back(s.position);
  }
  std::sort(sinks_.begin(), sinks_.end());
}

void AttentionPanel::focus_hottest_head(const AttentionCapture& cap) {
  // Until the user picks a layer or head, the panel opens on the head that puts the largest share
  // of its attention on the first token: the sink lesson, not layer 0 head 0 ("Sinks: none").
  if (user_chose_ || focused_request_ == cap.request || cap.n_layers <= 0 || cap.n_heads <= 0)
    return;
  focused_request_ = cap.request;
  double best = -1.0;
  for (int l = 0; l < cap.n_layers; ++l) {
    for (int h = 0; h < cap.n_heads; ++h) {
      const double share = cap.recorder->first_tokens_share(l, h, 1);
      if (share > best) {
        best = share;
        layer_ = l;
        head_ = h;
      }
    }
  }
  mean_heads_ = false;
}

// A horizontal colour scale: the heat colours from 0 to 1 with their meaning (`log`: the
// heatmap's log10 scale from 1e-4 to 1; else 0 to 100%).
void AttentionPanel::draw_heat_scale(const Palette& pal, const char* what, bool log) const {
  const float fs = ImGui::GetFontSize();
  const float w = fs * 10.0f, h = fs * 0.7f;
  ImGui::InvisibleButton("##heat_scale", ImVec2(w + fs * 16.0f, fs * 1.1f));
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 a(ImGui::GetItemRectMin().x, ImGui::GetItemRectMin().y + fs * 0.2f);
  const ImVec2 lo_size = ImGui::CalcTextSize(log ? "1e-4" : "0%");
  const float x0 = a.x + lo_size.x + 4.0f;
  dl->AddText(ImVec2(a.x, a.y - fs * 0.1f), pal.text_dim, log ? "1e-4" : "0%");
  constexpr int kSteps = 32;
  for (int i = 0; i < kSteps; ++i) {
    const float t0 = static_cast<float>(i) / kSteps;
    dl->AddRectFilled(ImVec2(x0 + w * t0, a.y),
                      ImVec2(x0 + w * (t0 + 1.0f / kSteps) + 0.5f, a.y + h),
                      attention_heat_color(t0 + 0.5f / kSteps, pal.block_free));
  }
  dl->AddRect(ImVec2(x0, a.y), ImVec2(x0 + w, a.y + h), pal.grid);
  char right[96];
  std::snprintf(right, sizeof right, "%s  %s", log ? "1" : "100%", what);
  dl->AddText(ImVec2(x0 + w + 4.0f, a.y - fs * 0.1f), pal.text_dim, right);
}

void AttentionPanel::draw_sink_grid(AppState& state,
                                    const std::shared_ptr<const AttentionCapture>& held) {
  const AttentionCapture& cap = *held;
  const Palette& pal = palette(state.presenter);
  const AttentionRecorder& rec = *cap.recorder;
  const int L = cap.n_layers, H = cap.n_heads;
  if (L <= 0 || H <= 0) return;
  update_sink_grid(held);
  draw_sink_summary(rec, L * H);
  // The colour scale: what a cell's colour means, 0 to 100% of the head's attention.
  draw_heat_scale(pal, "share on the first token(s)", false);
  // The grid: one row per layer, one column per head, labels on the left and on top; as large
  // as the panel allows (it is the lesson: a presenter's audience reads it from the back).
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float fs = ImGui::GetFontSize();
  const float label_w = ImGui::CalcTextSize("L00").x + fs * 0.5f;
  const float cell = std::max(
      4.0f, std::min((avail.x - label_w) / static_cast<float>(H), (avail.y - fs * 1.4f) / L));
  ImGui::InvisibleButton("##sink_grid", ImVec2(label_w + cell * H, fs * 1.2f + cell * L));
  const ImVec2 o(ImGui::GetItemRectMin().x + label_w, ImGui::GetItemRectMin().y + fs * 1.2f);
  draw_sink_cells(pal, o, cell, label_w, L, H);
  sink_grid_hover(rec, o, cell, L, H);
}

void AttentionPanel::update_sink_grid(const std::shared_ptr<const AttentionCapture>& held) {
  const AttentionCapture& cap = *held;
  const AttentionRecorder& rec = *cap.recorder;
  const int L = cap.n_layers, H = cap.n_heads;
  if (grid_of_ != held || grid_of_k_ != grid_k_ || grid_of_queries_ != rec.queries_seen()) {
    grid_of_ = held;
    grid_of_k_ = grid_k_;
    grid_of_queries_ = rec.queries_seen();
    grid_values_.assign(static_cast<std::size_t>(L) * H, 0.0f);
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < H; ++h)
        grid_values_[static_cast<std::size_t>(l) * H + h] =
            static_cast<float>(rec.first_tokens_share(l, h, grid_k_));
  }
}

void AttentionPanel::draw_sink_summary(const AttentionRecorder& rec, int num_heads) {
  // Summary: the mean share and how many heads put most of their attention there.
  double mean = 0.0;
  int majority = 0;
  for (float v : grid_values_) {
    mean += v;
    majority += v > 0.5f ? 1 : 0;
  }
  mean /= static_cast<double>(grid_values_.size());
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 7.0f);
  const char* const kFirst[] = {"first token", "first 4 tokens"};
  int k_index = grid_k_ == 4 ? 1 : 0;
  if (ImGui::Combo("##first_k", &k_index, kFirst, 2)) grid_k_ = k_index == 1 ? 4 : 1;
  ImGui::SameLine();
  ImGui::PushTextWrapPos(0.0f);
  ImGui::TextDisabled(
      "share of attention on the %s, mean over %d queries: %s over all heads; %d of %d heads put "
      "more than half there (sinks). Click a cell to open that head.",
      grid_k_ == 4 ? "first 4 tokens" : "first token", rec.queries_seen(),
      format_percent(mean).c_str(), majority, num_heads);
  ImGui::PopTextWrapPos();
}

void AttentionPanel::draw_sink_cells(const Palette& pal, ImVec2 o, float cell, float label_w, int L,
                                     int H) const {
  const float fs = ImGui::GetFontSize();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const bool labels = cell >= ImGui::CalcTextSize("100").x + 5.0f && cell >= fs * 1.1f;
  // Every k-th head and layer labelled, k such that labels never overlap.
  const int head_every =
      std::max(1, static_cast<int>(std::ceil((ImGui::CalcTextSize("H00").x + 4.0f) / cell)));
  const int layer_every = std::max(1, static_cast<int>(std::ceil(fs * 1.05f / cell)));
  for (int h = 0; h < H; h += head_every) {
    char t[16];
    std::snprintf(t, sizeof t, "H%d", h);
    dl->AddText(ImVec2(o.x + h * cell + 2.0f, o.y - fs * 1.15f), pal.text_dim, t);
  }
  for (int l = 0; l < L; ++l) {
    if (l % layer_every == 0) {
      char t[16];
      std::snprintf(t, sizeof t, "L%d", l);
      dl->AddText(ImVec2(o.x - label_w, o.y + l * cell + std::max(0.0f, (cell - fs) * 0.5f)),
                  pal.text_dim, t);
    }
    for (int h = 0; h < H; ++h) {
      const float v = grid_values_[static_cast<std::size_t>(l) * H + h];
      const ImVec2 a(o.x + h * cell, o.y + l * cell);
      const ImVec2 b(a.x + cell - 1.0f, a.y + cell - 1.0f);
      dl->AddRectFilled(a, b, attention_heat_color(std::clamp(v, 0.0f, 1.0f), pal.block_free));
      if (l == layer_ && h == head_ && !mean_heads_) dl->AddRect(a, b, pal.outline_selected);
      if (labels) {
        char t[8];
        std::snprintf(t, sizeof t, "%.0f", v * 100.0f);
        dl->AddText(ImVec2(a.x + 3.0f, a.y + 2.0f),
                    v > 0.55f ? IM_COL32(16, 18, 24, 235) : pal.text, t);
      }
    }
  }
}

void AttentionPanel::sink_grid_hover(const AttentionRecorder& rec, ImVec2 o, float cell, int L,
                                     int H) {
  if (ImGui::IsItemHovered()) {
    const ImVec2 m = ImGui::GetIO().MousePos;
    const int h = static_cast<int>((m.x - o.x) / cell), l = static_cast<int>((m.y - o.y) / cell);
    if (m.x >= o.x && m.y >= o.y && h >= 0 && h < H && l >= 0 && l < L) {
      ImGui::BeginTooltip();
      ImGui::Text("layer %d, head %d", l, h);
      ImGui::Text("%s of its attention on the first token, %s on the first 4",
                  format_percent(rec.first_tokens_share(l, h, 1)).c_str(),
                  format_percent(rec.first_tokens_share(l, h, 4)).c_str());
      ImGui::TextDisabled("%s on the 16 most recent tokens; click: open this head",
                          format_percent(rec.local_mass(l, h, 16)).c_str());
      ImGui::EndTooltip();
      if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) {
        layer_ = l;
        head_ = h;
        mean_heads_ = false;
        grid_ = false;
        user_chose_ = true;
      }
    }
  }
}

void AttentionPanel::draw_matrix(AppState& state, const AttentionCapture& cap, int n) {
  const Palette& pal = palette(state.presenter);
  const std::vector<std::uint8_t> live = state.source().slot_live(cap.request, state.step());
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float fs = ImGui::GetFontSize();
  // Room for the legend above, the key axis below and the query axis label on the left.
  const float legend_h = fs * 1.3f, axis_h = fs * 1.3f, left = fs * 1.4f;
  const float side =
      std::max(8.0f, std::min(avail.x - fs - left,
                              avail.y - fs * 0.8f - legend_h - axis_h - error_strip_height()));
  const float cell = side / static_cast<float>(n);
  const int bin = std::max(1, static_cast<int>(std::ceil(1.0f / cell)));  // keys per drawn cell
  draw_matrix_legend(pal, !live.empty(), cap.selection.has_value());
  ImGui::InvisibleButton("##matrix", ImVec2(side + fs + left, side + fs * 0.8f + axis_h));
  const ImVec2 o(ImGui::GetItemRectMin().x + fs * 0.5f + left,
                 ImGui::GetItemRectMin().y + fs * 0.7f);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRectFilled(o, ImVec2(o.x + side, o.y + side), pal.block_free);
  // The causal mask (a key after its query is never attended): hatched, unlike a weight of 0.
  draw_causal_mask(dl, pal, o, side);
  float vmax = 0.0f;
  for (float v : view_) vmax = std::max(vmax, v);
  const auto un = static_cast<std::size_t>(n);
  for (int q = 0; q < n; q += bin) {
    for (int k = 0; k <= q; k += bin) {
      float v = 0.0f;  // the bin's strongest weight
      for (int qq = q; qq < std::min(n, q + bin); ++qq)
        for (int kk = k; kk < std::min(qq + 1, k + bin); ++kk)
          v = std::max(v, view_[static_cast<std::size_t>(qq) * un + static_cast<std::size_t>(kk)]);
      const float t = log_scale_ ? (std::log10(std::max(v, kLogFloor)) - std::log10(kLogFloor)) /
                                       -std::log10(kLogFloor)
                                 : (vmax > 0 ? v / vmax : 0.0f);
      if (t <= 0.0f) {
        // Under a selection a weight of exactly 0 is a key the query did not pick (still cached).
        if (cap.selection && v == 0.0f) {
          const ImVec2 a(o.x + k * cell, o.y + q * cell);
          dl->AddRectFilled(a, ImVec2(a.x + cell * bin, a.y + cell * bin), not_picked_color(pal));
        }
        continue;
      }
      ImU32 c = attention_heat_color(t, pal.block_free);
      if (!live.empty() && static_cast<std::size_t>(k) < live.size() &&
          live[static_cast<std::size_t>(k)] == 0)
        c = mix_color(pal.block_free, pal.text_dim, 0.35f);  // evicted key: greyed
      const ImVec2 a(o.x + k * cell, o.y + q * cell);
      dl->AddRectFilled(a, ImVec2(a.x + cell * bin, a.y + cell * bin), c);
    }
  }
  for (int s : sinks_) {  // a marker over each sink column
    const float x = o.x + (s + 0.5f) * cell;
    dl->AddTriangleFilled(ImVec2(x - fs * 0.3f, o.y - fs * 0.6f),
                          ImVec2(x + fs * 0.3f, o.y - fs * 0.6f), ImVec2(x, o.y - fs * 0.1f),
                          pal.warn);
  }
  dl->AddRect(o, ImVec2(o.x + side, o.y + side), pal.grid);
  // Axes: key positions along the bottom (first, sinks, last), queries down the left.
  const auto key_tick = [&](int k) {
    char t[16];
    std::snprintf(t, sizeof t, "%d", k);
    const float x = o.x + (k + 0.5f) * cell - ImGui::CalcTextSize(t).x * 0.5f;
    dl->AddText(ImVec2(x, o.y + side + 2.0f), pal.text_dim, t);
  };
  key_tick(0);
  if (n > 1) key_tick(n - 1);
  dl->AddText(
      ImVec2(o.x + side * 0.5f - ImGui::CalcTextSize("key position").x * 0.5f, o.y + side + 2.0f),
      pal.text_dim, "key position");
  dl->AddText(ImVec2(o.x - left - fs * 0.3f, o.y + side * 0.5f - fs * 0.5f), pal.text_dim, "q");
  dl->AddText(ImVec2(o.x - left - fs * 0.3f, o.y - fs * 0.1f), pal.text_dim, "0");
  matrix_tooltip(state, cap, n, o, cell);
  draw_error_strip(state, cap, n, o.x, cell);
}

void AttentionPanel::matrix_tooltip(const AppState& state, const AttentionCapture& cap, int n,
                                    ImVec2 o, float cell) const {
  const Palette& pal = palette(state.presenter);
  const auto un = static_cast<std::size_t>(n);
  if (ImGui::IsItemHovered()) {
    const ImVec2 m = ImGui::GetIO().MousePos;
    const int k = static_cast<int>((m.x - o.x) / cell), q = static_cast<int>((m.y - o.y) / cell);
    if (q >= 0 && q < n && k >= 0 && k < n) {
      ImGui::BeginTooltip();
      if (k > q) {
        ImGui::TextDisabled("key %d is after query %d: causal mask (never attended)", k, q);
      } else {
        ImGui::Text("query %d \"%s\" -> key %d \"%s\"", q, token_text(state, cap, q).c_str(), k,
                    token_text(state, cap, k).c_str());
        const float w = view_[static_cast<std::size_t>(q) * un + static_cast<std::size_t>(k)];
        ImGui::Text("weight %.4f", w);
        if (cap.selection && w == 0.0f && !mean_heads_) {
          ImGui::TextDisabled("not picked by %s: still in the cache, a later query may pick it",
                              selector_kind_name(cap.selection->selector));
        }
        if (std::find(sinks_.begin(), sinks_.end(), k) != sinks_.end())
          ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(pal.warn), "detected sink");
      }
      ImGui::EndTooltip();
    }
  }
}

// Diagonal hatching over the matrix's upper triangle (key > query).
void AttentionPanel::draw_causal_mask(ImDrawList* dl, const Palette& pal, ImVec2 o, float side) {
  dl->AddTriangleFilled(o, ImVec2(o.x + side, o.y), ImVec2(o.x + side, o.y + side),
                        mix_color(pal.panel_bg, pal.block_free, 0.5f));
  const float gap = std::max(6.0f, ImGui::GetFontSize() * 0.6f);
  // Lines of slope -1 (x + y = c) clipped to the triangle above the diagonal y = x.
  for (float c = gap; c < 2.0f * side; c += gap) {
    const float x_start = std::max(c * 0.5f, c - side), x_end = std::min(side, c);
    if (x_end <= x_start) continue;
    dl->AddLine(ImVec2(o.x + x_start, o.y + c - x_start), ImVec2(o.x + x_end, o.y + c - x_end),
                mix_color(pal.panel_bg, pal.grid, 0.7f), 1.0f);
  }
}

// What the heatmap's colours mean: weights, evicted keys, the causal mask, sinks.
void AttentionPanel::draw_matrix_legend(const Palette& pal, bool evictions, bool selection) const {
  const float fs = ImGui::GetFontSize();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const auto swatch = [&](ImU32 fill, const char* text, bool hatch) {
    const ImVec2 a = ImGui::GetCursorScreenPos();
    const ImVec2 b(a.x + fs * 0.9f, a.y + fs * 0.9f);
    dl->AddRectFilled(a, b, fill);
    if (hatch)
      dl->AddLine(ImVec2(a.x, b.y), ImVec2(b.x, a.y), mix_color(pal.panel_bg, pal.grid, 0.7f));
    dl->AddRect(a, b, pal.grid);
    ImGui::Dummy(ImVec2(fs * 1.0f, fs * 0.9f));
    ImGui::SameLine();
    ImGui::TextDisabled("%s", text);
    ImGui::SameLine(0.0f, fs);
  };
  swatch(attention_heat_color(0.9f, pal.block_free),
         log_scale_ ? "weight (log, 1e-4 to 1)" : "weight (linear)", false);
  if (evictions) swatch(mix_color(pal.block_free, pal.text_dim, 0.35f), "evicted key", false);
  if (selection) swatch(not_picked_color(pal), "not picked (weight 0, still cached)", false);
  swatch(mix_color(pal.panel_bg, pal.block_free, 0.5f), "masked (key after query)", true);
  ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(pal.warn), "v");
  ImGui::SameLine(0.0f, 4.0f);
  ImGui::TextDisabled("sink");
}

void AttentionPanel::draw_cumulative(AppState& state, const AttentionCapture& cap, int n) {
  const Palette& pal = palette(state.presenter);
  const std::vector<std::uint8_t> live = state.source().slot_live(cap.request, state.step());
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float fs = ImGui::GetFontSize();
  const ImVec2 size(std::max(20.0f, avail.x), std::max(40.0f, avail.y - error_strip_height()));
  ImGui::InvisibleButton("##cumulative", size);
  const ImVec2 o(ImGui::GetItemRectMin().x, ImGui::GetItemRectMin().y + fs);
  // The error strip's K / V / A labels need room on the right.
  const float w = size.x - (show_errors_ ? fs * 1.2f : 0.0f), h = size.y - fs * 1.2f;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  float vmax = 0.0f;
  for (float v : view_) vmax = std::max(vmax, v);
  const float bar = w / static_cast<float>(n);
  dl->AddRectFilled(o, ImVec2(o.x + w, o.y + h), pal.panel_bg);
  for (int k = 0; k < n; ++k) {
    const float v = vmax > 0 ? view_[static_cast<std::size_t>(k)] / vmax : 0.0f;
    ImU32 c = attention_heat_color(0.35f + 0.65f * v, pal.block_free);
    if (!live.empty() && static_cast<std::size_t>(k) < live.size() &&
        live[static_cast<std::size_t>(k)] == 0)
      c = mix_color(pal.block_free, pal.text_dim, 0.35f);
    dl->AddRectFilled(ImVec2(o.x + k * bar, o.y + h * (1.0f - v)),
                      ImVec2(o.x + (k + 1) * bar, o.y + h), c);
  }
  for (int s : sinks_) {
    const float x = o.x + (s + 0.5f) * bar;
    dl->AddTriangleFilled(ImVec2(x - fs * 0.3f, o.y - fs * 0.8f),
                          ImVec2(x + fs * 0.3f, o.y - fs * 0.8f), ImVec2(x, o.y - fs * 0.2f),
                          pal.warn);
  }
  dl->AddLine(ImVec2(o.x, o.y + h), ImVec2(o.x + w, o.y + h), pal.axis);
  if (ImGui::IsItemHovered()) {
    const int k = static_cast<int>((ImGui::GetIO().MousePos.x - o.x) / bar);
    if (k >= 0 && k < n) {
      ImGui::BeginTooltip();
      ImGui::Text("key %d \"%s\"", k, token_text(state, cap, k).c_str());
      ImGui::Text("attention received %.3f (from %d queries)", view_[static_cast<std::size_t>(k)],
                  n - k);
      ImGui::EndTooltip();
    }
  }
  draw_error_strip(state, cap, n, o.x, bar);
}

void AttentionPanel::draw(AppState& state) {
  scan_tokens(state);
  apply_focus(state);
  const std::shared_ptr<const RunInfo> info = state.source().run_info();
  if (!info || !info->model) {
    ImGui::TextDisabled("attention needs the model: open a scenario (recordings hold no weights)");
    return;
  }
  take_capture();
  const int request = pick_request(state);
  if (request < 0) {
    ImGui::TextDisabled("no sequence yet");
    return;
  }
  const std::vector<int> tokens = sequence_tokens(state, request);
  const int n = std::min(shown_positions(state, request), info->shape.seq_len);
  const auto cit = captures_.find(request);
  const AttentionCapture* cap = cit != captures_.end() ? cit->second.get() : nullptr;
  const std::optional<KvFormat> preview = wanted_preview(*info);
  const std::optional<SparseOptions> selection = shown_selection(info->config);
  const bool preview_stale =
      cap != nullptr &&
      ((show_errors_ && !selection && cap->preview != preview) || cap->selection != selection);
  if ((cap == nullptr || static_cast<int>(cap->tokens.size()) < n || preview_stale) &&
      !job_.busy() && last_error_.empty())
    job_.start(info->model, info->config, generation_, request, tokens, preview, selection);

  draw_header(*info, request);

  draw_status_lines(state, request, n, cap, static_cast<int>(tokens.size()));
  if (!last_error_.empty() || n <= 0 || cap == nullptr || static_cast<int>(cap->tokens.size()) < n)
    return;
  focus_hottest_head(*cap);
  if (grid_) {
    draw_sink_grid(state, cit->second);
    return;
  }
  build_view(*cap, n);
  draw_view_caption(state, *cap, request, n);
  if (n <= kMatrixLimit && cap->recorder->has_full_matrices())
    draw_matrix(state, *cap, n);
  else
    draw_cumulative(state, *cap, n);
}

void AttentionPanel::apply_focus(AppState& state) {
  // A presenter caption's view: its layer and head (or the sink grid) win over the auto focus.
  if (state.attention_focus) {
    const AppState::AttentionFocus& f = *state.attention_focus;
    if (f.layer) layer_ = *f.layer;
    if (f.head) head_ = *f.head;
    if (f.sink_grid) grid_ = *f.sink_grid;
    if (f.layer || f.head) mean_heads_ = false;
    user_chose_ = true;
    state.attention_focus.reset();
  }
}

void AttentionPanel::take_capture() {
  if (std::shared_ptr<AttentionCapture> c = job_.take()) {
    if (c->generation == generation_) {
      if (c->error.empty())
        captures_[c->request] = std::move(c);
      else
        last_error_ = c->error;
    }
  }
}

std::vector<int> AttentionPanel::sequence_tokens(const AppState& state, int request) const {
  // The sequence's tokens as far as the run has computed them (prompt, then sampled tokens).
  std::vector<int> tokens(state.source().prompt_tokens(request).begin(),
                          state.source().prompt_tokens(request).end());
  if (auto it = generated_.find(request); it != generated_.end()) {
    for (std::size_t p = tokens.size(); p < it->second.size() && it->second[p] >= 0; ++p)
      tokens.push_back(it->second[p]);
  }
  return tokens;
}

void AttentionPanel::draw_header(const RunInfo& info, int request) {
  // Header: sequence, layer, head.
  ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(sequence_color(request)), "seq %d", request);
  item_tooltip("The selected sequence (click one in the block map or block tables)");
  // The controls continue the line while they fit and wrap in a narrow panel.
  const float gap = ImGui::GetStyle().ItemSpacing.x;
  const float w = ImGui::GetFontSize() * 5.5f;
  flow_same_line(labeled_width(w, "layer"), gap);
  ImGui::SetNextItemWidth(w);
  user_chose_ |= ImGui::SliderInt("layer", &layer_, 0, std::max(0, info.shape.n_layers - 1));
  layer_ = std::clamp(layer_, 0, std::max(0, info.shape.n_layers - 1));
  flow_same_line(labeled_width(w, "head"), gap);
  ImGui::BeginDisabled(mean_heads_);
  ImGui::SetNextItemWidth(w);
  user_chose_ |= ImGui::SliderInt("head", &head_, 0, std::max(0, info.shape.n_heads - 1));
  head_ = std::clamp(head_, 0, std::max(0, info.shape.n_heads - 1));
  ImGui::EndDisabled();
  flow_same_line(check_width("mean of heads"), gap);
  user_chose_ |= ImGui::Checkbox("mean of heads", &mean_heads_);
  draw_selection_combo(info);
  flow_same_line(check_width("log"), gap);
  ImGui::Checkbox("log", &log_scale_);
  item_tooltip("Colour by log10(weight) from 1e-4 to 1 (off: linear, scaled to the largest)");
  flow_same_line(check_width("sink grid"), gap);
  ImGui::Checkbox("sink grid", &grid_);
  item_tooltip(
      "Every layer x head at once, coloured by the share of its attention on the first "
      "token(s): where the attention sinks are. Click a cell to open that head",
      "G");
  if (!ImGui::GetIO().WantTextInput &&
      ImGui::IsWindowFocused(ImGuiFocusedFlags_RootAndChildWindows) &&
      ImGui::IsKeyPressed('G'))  // GLFW key codes are ASCII
    grid_ = !grid_;
  draw_error_controls(info);
}

void AttentionPanel::draw_status_lines(const AppState& state, int request, int n,
                                       const AttentionCapture* cap, int num_tokens) const {
  // Status lines wrap at the panel's edge.
  ImGui::PushTextWrapPos(0.0f);
  if (!last_error_.empty()) {
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(palette(state.presenter).warn),
                       "capture failed: %s", last_error_.c_str());
  } else if (n <= 0) {
    ImGui::TextDisabled("seq %d has no token in its cache at step %d", request, state.step());
  } else if (cap == nullptr || static_cast<int>(cap->tokens.size()) < n) {
    ImGui::TextDisabled("capturing attention of seq %d (%d tokens) on a background thread...",
                        request, num_tokens);
  }
  ImGui::PopTextWrapPos();
}

void AttentionPanel::draw_view_caption(const AppState& state, const AttentionCapture& cap,
                                       int request, int n) const {
  const std::vector<std::uint8_t> live = state.source().slot_live(request, state.step());
  std::string sinks = sinks_.empty() ? "none" : "";
  for (std::size_t i = 0; i < sinks_.size() && i < 6; ++i)
    sinks += (i ? ", " : "") + std::to_string(sinks_[i]);
  if (sinks_.size() > 6) sinks += " (+" + std::to_string(sinks_.size() - 6) + ")";
  ImGui::PushTextWrapPos(0.0f);
  if (cap.selection) {
    const SparseOptions& o = *cap.selection;
    ImGui::TextDisabled(
        "Sparse attention: each query head attends %d keys %s; the cache keeps every key, so "
        "one skipped now can be picked later (eviction would have lost it).",
        o.topk,
        o.selector == SelectorKind::kOracle  ? "with the highest true scores (the oracle)"
        : o.selector == SelectorKind::kQuest ? "in whole blocks by Quest's min/max bound"
                                             : "by q.k over its largest |q| channels (SparQ)");
  }
  ImGui::TextDisabled(
      "%d tokens at step %d, %s. Sinks (red, >= 4x the uniform share): %s%s", n, state.step(),
      n <= kMatrixLimit ? "query (row) x key (column)" : "cumulative attention per key",
      sinks.c_str(),
      live.empty()         ? ""
      : cap.under_eviction ? "; grey: evicted (the weights are the evicted cache's own)"
                           : "; grey: evicted");
  ImGui::PopTextWrapPos();
}

}  // namespace kvscope::ui

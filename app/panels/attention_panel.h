// Attention heatmap panel: for the selected sequence, the attention weights of one layer and head
// (or the mean over heads) as a query x key matrix for short runs (<= 256 tokens) and as
// cumulative attention per key position for longer ones, sinks marked, evicted positions greyed
// when the run records them. The weights come from an AttentionJob on a background thread.
// Optional overlay: the per-position quantization error of the cache (K, V, attention rows) as a
// strip under the key axis; on fp32 runs a format can be previewed (attention_qerr.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/core/attention_job.h"
#include "app/panels/panel.h"

namespace kvscope::ui {

struct RunInfo;
struct Palette;

// The panel's colormap: background -> blue -> warm yellow for t in [0, 1].
ImU32 attention_heat_color(float t, ImU32 bg);

class AttentionPanel final : public Panel {
 public:
  static constexpr int kMatrixLimit = 256;  // longer sequences show cumulative attention

  const char* title() const override { return "Attention"; }
  // "Attention: <model>": the weights and the quantization-error figures are that model's.
  std::string shown_title(const AppState& state) const override;
  std::string help() const override;
  const char* docs_page() const override { return "docs/ui/attention.md#attention"; }
  void draw(AppState& state) override;
  bool busy() const override { return job_.busy(); }

  // Tests: wait for the background capture and whether one is cached for `request`.
  void wait_for_capture() { job_.cancel_after_finish(); }
  bool has_capture(int request) const { return captures_.count(request) != 0; }
  // Tests: the cached capture of `request` (null if none).
  const AttentionCapture* capture(int request) const {
    const auto it = captures_.find(request);
    return it == captures_.end() ? nullptr : it->second.get();
  }
  // Tests: the quantization-error overlay and its preview format (a name `kvscope eval` takes).
  void set_error_overlay(bool on, const std::string& preview = "int4");
  // The sink grid (every layer x head at once, coloured by the share of attention on the first
  // `first_k` tokens) instead of one head's heatmap; clicking a cell opens that head.
  void set_sink_grid(bool on, int first_k = 1) {
    grid_ = on;
    grid_k_ = first_k;
  }
  bool sink_grid() const { return grid_; }
  // Sparse attention by token selection instead of dense: each query head attends only to the
  // keys `selection` picks from the whole cache (engine/sparse); none: dense (the default).
  void set_selection(std::optional<SparseOptions> selection) { selection_ = selection; }
  const std::optional<SparseOptions>& selection() const { return selection_; }
  int layer() const { return layer_; }
  int head() const { return head_; }
  // [layer * heads + head] shares of the last grid drawn (tests).
  const std::vector<float>& grid_values() const { return grid_values_; }

 private:
  void scan_tokens(const AppState& state);
  // A presenter caption's layer, head or sink grid, taken once.
  void apply_focus(AppState& state);
  // Keeps the finished capture (of this run) or its error.
  void take_capture();
  // The sequence's tokens as far as the run has computed them (prompt, then sampled tokens).
  std::vector<int> sequence_tokens(const AppState& state, int request) const;
  // The header line: sequence, layer, head, mean, log, sink grid (G) and the error overlay.
  void draw_header(const RunInfo& info, int request);
  // Why nothing is drawn yet: a failed capture, an empty cache, a capture running.
  void draw_status_lines(const AppState& state, int request, int n, const AttentionCapture* cap,
                         int num_tokens) const;
  // The line above the matrix: tokens, step, what is drawn, the sinks, evicted keys.
  void draw_view_caption(const AppState& state, const AttentionCapture& cap, int request,
                         int n) const;
  int pick_request(const AppState& state) const;
  int shown_positions(const AppState& state, int request) const;
  void build_view(const AttentionCapture& cap, int n);
  void draw_matrix(AppState& state, const AttentionCapture& cap, int n);
  // The hovered cell of the matrix at `o` (`cell` pixels per position): query, key, weight.
  void matrix_tooltip(const AppState& state, const AttentionCapture& cap, int n, ImVec2 o,
                      float cell) const;
  void draw_cumulative(AppState& state, const AttentionCapture& cap, int n);
  void draw_sink_grid(AppState& state, const std::shared_ptr<const AttentionCapture>& cap);
  // The sink grid's steps: its values (recomputed when the capture, k or queries change), the
  // summary line with the first-k choice, the cells with their labels, and the hovered cell
  // (a click opens that head).
  void update_sink_grid(const std::shared_ptr<const AttentionCapture>& held);
  void draw_sink_summary(const AttentionRecorder& rec, int num_heads);
  void draw_sink_cells(const Palette& pal, ImVec2 o, float cell, float label_w, int L, int H) const;
  void sink_grid_hover(const AttentionRecorder& rec, ImVec2 o, float cell, int L, int H);
  // Opens the head with the largest share on the first token, once per sequence, until the
  // user picks a layer, head or the mean.
  void focus_hottest_head(const AttentionCapture& cap);
  void draw_heat_scale(const Palette& pal, const char* what, bool log) const;
  static void draw_causal_mask(ImDrawList* dl, const Palette& pal, ImVec2 o, float side);
  void draw_matrix_legend(const Palette& pal, bool evictions, bool selection) const;
  // The "keys" combo: all (dense) or a selector and k; disabled for runs that evict or use MLA.
  void draw_selection_combo(const RunInfo& info);
  // The selection the heatmap shows for a run of `config`: a sparse run's own, else the one picked
  // in the combo when the run has a whole cache to pick from, else none (dense).
  std::optional<SparseOptions> shown_selection(const SimConfig& config) const;
  std::string token_text(const AppState& state, const AttentionCapture& cap, int pos) const;
  // Quantization-error overlay (attention_qerr.cpp).
  std::optional<KvFormat> wanted_preview(const RunInfo& info) const;  // fp32 runs with overlay
  void draw_error_controls(const RunInfo& info);
  float error_strip_height() const;  // 0 when the overlay is off
  // The strip under the key axis: x0 = left edge of position 0, `step` pixels per position.
  void draw_error_strip(AppState& state, const AttentionCapture& cap, int n, float x0, float step);

  AttentionJob job_;
  int generation_ = -1;
  int scanned_until_ = -1;
  std::map<int, std::vector<int>> generated_;     // request -> [position] sampled token (-1)
  std::map<int, std::vector<int>> sampled_step_;  // request -> [position] step it was sampled
  // request -> (step, tokens fed through the model after it), from PrefillChunk / DecodeToken:
  // with token eviction the cache holds fewer slots than the tokens the queries ran over.
  std::map<int, std::vector<std::pair<int, int>>> fed_;
  std::map<int, std::shared_ptr<const AttentionCapture>> captures_;  // by request, this run
  std::string last_error_;
  int layer_ = 0;
  int head_ = 0;
  bool user_chose_ = false;   // a layer, head or the mean was picked: no more auto focus
  int focused_request_ = -1;  // the sequence whose hottest head was opened
  bool mean_heads_ = false;
  bool log_scale_ = true;
  bool show_errors_ = false;
  std::string preview_ = "int4";            // format previewed on fp32 runs (K and V)
  std::optional<SparseOptions> selection_;  // sparse attention shown instead of dense
  // The weights shown, cached by what they depend on.
  const AttentionCapture* view_of_ = nullptr;
  int view_layer_ = -1, view_head_ = -1, view_n_ = -1;
  bool view_mean_ = false;
  std::vector<float> view_;  // n x n matrix (row = query) or [n] cumulative
  std::vector<int> sinks_;   // sink positions for the layer/head shown
  // The sink grid.
  bool grid_ = false;
  int grid_k_ = 1;                                   // the first k tokens (1 or 4)
  std::shared_ptr<const AttentionCapture> grid_of_;  // held: its address cannot be reused
  int grid_of_k_ = -1;
  int grid_of_queries_ = -1;
  std::vector<float> grid_values_;  // [layer][head] share on the first grid_k_ tokens
};

}  // namespace kvscope::ui

// Attention heatmap panel: for the selected sequence, the attention weights of one layer and head
// (or the mean over heads) as a query x key matrix for short runs (<= 256 tokens) and as
// cumulative attention per key position for longer ones, sinks marked, evicted positions greyed
// when the run records them. The weights come from an AttentionJob on a background thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "app/core/attention_job.h"
#include "app/panels/panel.h"

namespace kvscope::ui {

class AttentionPanel final : public Panel {
 public:
  static constexpr int kMatrixLimit = 256;  // longer sequences show cumulative attention

  const char* title() const override { return "Attention"; }
  std::string help() const override;
  const char* docs_page() const override { return "docs/ui.md#attention"; }
  void draw(AppState& state) override;
  bool busy() const override { return job_.busy(); }

  // Tests: wait for the background capture and whether one is cached for `request`.
  void wait_for_capture() { job_.cancel_after_finish(); }
  bool has_capture(int request) const { return captures_.count(request) != 0; }

 private:
  void scan_tokens(const AppState& state);
  int pick_request(const AppState& state) const;
  int shown_positions(const AppState& state, int request) const;
  void build_view(const AttentionCapture& cap, int n);
  void draw_matrix(AppState& state, const AttentionCapture& cap, int n);
  void draw_cumulative(AppState& state, const AttentionCapture& cap, int n);
  std::string token_text(const AppState& state, const AttentionCapture& cap, int pos) const;

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
  bool mean_heads_ = false;
  bool log_scale_ = true;
  // The weights shown, cached by what they depend on.
  const AttentionCapture* view_of_ = nullptr;
  int view_layer_ = -1, view_head_ = -1, view_n_ = -1;
  bool view_mean_ = false;
  std::vector<float> view_;  // n x n matrix (row = query) or [n] cumulative
  std::vector<int> sinks_;   // sink positions for the layer/head shown
};

}  // namespace kvscope::ui

// Text panel: each request's phase and its text so far at the selected step: the prompt dimmed,
// then the generated tokens (decoded from the DecodeToken events) in the request's colour; tokens
// served by the prefix cache, recomputed after a preemption or evicted are marked (legend on top).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "app/panels/panel.h"

namespace kvscope::ui {

class TextPanel final : public Panel {
 public:
  const char* title() const override { return "Text"; }
  std::string help() const override;
  const char* docs_page() const override { return "docs/ui/pool.md#text"; }
  void draw(AppState& state) override;

 private:
  void catch_up(const AppState& state);  // folds DecodeToken events up to the selected step
  void draw_request(const AppState& state, const RequestState& r);

  int generation_ = -1;                     // AppState::source_generation() tokens_ was built from
  int built_until_ = -1;                    // events of steps [0, built_until_] are folded in
  std::map<int, std::vector<int>> tokens_;  // request id -> [position] generated token id (or -1)
  std::map<int, std::int64_t> hit_tokens_;  // request id -> tokens its latest prefix lookup hit
  std::map<int, bool> preempted_;           // request id -> recompute-preempted since admission
  std::map<int, std::vector<std::uint8_t>>
      recomputed_;             // request id -> [position] 1: prefilled again
  std::vector<float> widths_;  // scratch: [piece] the drawn width of one request's pieces
};

}  // namespace kvscope::ui

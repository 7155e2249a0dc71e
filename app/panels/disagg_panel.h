// Prefill/decode panel (issue #44): the shown scenario's requests run colocated (one GPU) and
// disaggregated (a prefill GPU and a decode GPU joined by a link) on the modelled clock of
// engine/sched/disagg.h. Time to first token split into queue, prefill, transfer and first
// decode for both; each GPU's steps and the link's transfers on one time axis; the two pools side
// by side at the time chosen, with the prefill pool's blocks held for the link and the blocks in
// flight between them. The link and the transfer mode are choices that re-run it.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/core/disagg_job.h"
#include "app/panels/panel.h"

namespace kvscope::ui {

class DisaggPanel final : public Panel {
 public:
  const char* title() const override { return "Prefill/decode"; }
  std::string help() const override;
  const char* docs_page() const override { return "docs/concepts/disaggregation.md"; }
  void draw(AppState& state) override;
  bool busy() const override { return job_.busy(); }

  // Tests: the runs shown (null while none), waiting for the job, the time shown and the pools
  // drawn at it (as of the last frame).
  const DisaggView* shown() const { return view_.get(); }
  void wait_for_run() { job_.wait(); }
  void set_time(double seconds) { time_ = seconds; }
  double time() const { return time_; }
  void set_link(const std::string& preset) { link_ = preset; }
  const std::optional<PoolsAt>& drawn_pools() const { return drawn_; }
  // The block maps drawn (prefill, decode; empty when the run recorded none).
  const std::vector<BlockOwner>& drawn_map(int instance) const {
    return drawn_maps_[static_cast<std::size_t>(instance)];
  }

 private:
  struct Wanted {
    int generation = -1;
    std::string variant, link, transfer;
    bool operator==(const Wanted&) const = default;
  };
  static bool auto_run(const RunInfo& info);
  // Whether the runs shown are of the run and the link and transfer chosen now.
  bool shows(const AppState& state) const;
  void poll(const AppState& state, const std::shared_ptr<const RunInfo>& info);
  void draw_controls(const AppState& state);
  void draw_ttft(const AppState& state);
  void draw_lanes(const AppState& state);
  void draw_pools(const AppState& state);
  // The pools' rows: each instance's block map (when the run recorded one) and the colocated
  // pool's bar; what draw_lanes leaves them.
  static float map_height();
  static float pools_height(const DisaggView& v);

  DisaggJob job_;
  std::shared_ptr<DisaggView> view_;
  std::optional<Wanted> running_, failed_, requested_;
  std::string link_;      // "" = the scenario's
  std::string transfer_;  // "" = the scenario's
  double time_ = -1;      // the time shown (s); < 0: not placed yet
  double span_ = 0;       // the time axis's width (s); 0: not placed yet
  bool playing_ = false;
  std::optional<PoolsAt> drawn_;
  std::array<std::vector<BlockOwner>, 2> drawn_maps_;
  float map_h_ = 0;  // the block maps' height this frame (draw_lanes sets it)
};

}  // namespace kvscope::ui

// AppState: step selection, cached pool state and playback.
#include "app/core/app_state.h"

#include <algorithm>

namespace kvscope::ui {

const RequestState* find_request(const PoolState& pool, int id) {
  const auto& rs = pool.requests;
  if (id >= 0 && static_cast<std::size_t>(id) < rs.size() && rs[id].id == id) return &rs[id];
  const auto it = std::lower_bound(rs.begin(), rs.end(), id,
                                   [](const RequestState& r, int v) { return r.id < v; });
  return (it != rs.end() && it->id == id) ? &*it : nullptr;
}

AppState::AppState(std::unique_ptr<DataSource> source) : source_(std::move(source)) {
  source_->state_at(step_, pool_);
}

void AppState::set_source(std::unique_ptr<DataSource> source) {
  source_ = std::move(source);
  ++source_generation_;
  selected_request.reset();
  follow_live = false;
  step_ = std::clamp(step_, 0, source_->num_steps() - 1);
  source_->state_at(step_, pool_);
}

void AppState::set_step(int step) {
  follow_live = false;
  go_to(step);
}

void AppState::go_to(int step) {
  const int clamped = std::clamp(step, 0, num_steps() - 1);
  if (clamped == step_) return;
  step_ = clamped;
  source_->state_at(step_, pool_);
}

void AppState::toggle_play() {
  if (!playing && step_ >= num_steps() - 1) set_step(0);  // replay from the start at the end
  playing = !playing;
  follow_live = false;
  step_accumulator_ = 0.0;
}

namespace {
// The first pause step in (from, to], or -1.
int first_pause(const std::vector<int>& pauses, int from, int to) {
  for (int s : pauses)
    if (s > from && s <= to) return s;
  return -1;
}
}  // namespace

void AppState::advance(double dt_seconds) {
  if (!playing) return;
  const bool live = source_->is_live();
  if (follow_live) {
    if (const int p = first_pause(pause_steps, step_, num_steps() - 1); p >= 0) {
      go_to(p);  // a caption's moment: stop there, the run goes on computing behind
      playing = follow_live = false;
      return;
    }
    go_to(num_steps() - 1);
    if (!live && step_ >= num_steps() - 1) playing = follow_live = false;
    return;
  }
  step_accumulator_ += dt_seconds * speed;
  const int whole = static_cast<int>(step_accumulator_);
  if (whole <= 0) return;
  step_accumulator_ -= whole;
  if (const int p = first_pause(pause_steps, step_, step_ + whole); p >= 0) {
    go_to(p);
    playing = false;
    return;
  }
  go_to(step_ + whole);
  if (step_ >= num_steps() - 1) {
    if (live)
      follow_live = true;
    else
      playing = false;
  }
}

}  // namespace kvscope::ui

// Timeline: append-only events and metrics, snapshots, and state reconstruction at any step.
#include "engine/trace/timeline.h"

#include <algorithm>
#include <mutex>
#include <string>

#include "engine/common/error.h"
#include "engine/trace/timeline_replay.h"

namespace kvscope {

const char* request_phase_name(RequestPhase phase) {
  switch (phase) {
    case RequestPhase::kWaiting:
      return "waiting";
    case RequestPhase::kRunning:
      return "running";
    case RequestPhase::kSwapped:
      return "swapped";
    case RequestPhase::kFinished:
      return "finished";
    case RequestPhase::kRejected:
      return "rejected";
  }
  return "?";
}

Timeline::Timeline(TimelineHeader header) : header_(std::move(header)) {
  if (header_.num_blocks <= 0) {
    fail_expected("timeline header: num_blocks", "a positive integer",
                  std::to_string(header_.num_blocks));
  }
  if (header_.block_size <= 0 || header_.block_size > 32767) {
    fail_expected("timeline header: block_size", "an integer in [1, 32767]",
                  std::to_string(header_.block_size));
  }
  live_ = initial_pool_state(header_.num_blocks, header_.block_size);
  // A snapshot costs O(blocks) memory; one taken after fewer events than a quarter of the pool
  // would cost more than replaying those events, so it is skipped.
  snapshot_min_events_ = static_cast<std::size_t>(header_.num_blocks) / 4;
  take_snapshot(-1);
}

Timeline::~Timeline() = default;

Timeline::Timeline(Timeline&& other) noexcept {
  std::unique_lock lock(other.mutex_);
  header_ = std::move(other.header_);
  events_ = std::move(other.events_);
  step_end_ = std::move(other.step_end_);
  metrics_ = std::move(other.metrics_);
  snapshots_ = std::move(other.snapshots_);
  live_ = std::move(other.live_);
  snapshot_min_events_ = other.snapshot_min_events_;
}

Timeline& Timeline::operator=(Timeline&& other) noexcept {
  if (this == &other) return *this;
  std::scoped_lock lock(mutex_, other.mutex_);
  header_ = std::move(other.header_);
  events_ = std::move(other.events_);
  step_end_ = std::move(other.step_end_);
  metrics_ = std::move(other.metrics_);
  snapshots_ = std::move(other.snapshots_);
  live_ = std::move(other.live_);
  snapshot_min_events_ = other.snapshot_min_events_;
  return *this;
}

void Timeline::emit(const Event& event) {
  Event e = event;
  e.step = static_cast<std::int32_t>(step_end_.size());  // events belong to the open step
  apply_event(live_, e);  // validates block ids before anything is published
  std::unique_lock lock(mutex_);
  events_.push_back(e);
}

void Timeline::end_step(const StepMetrics& metrics) {
  const int step = static_cast<int>(step_end_.size());
  StepMetrics m = metrics;
  m.step = step;
  live_.step = step;
  {
    std::unique_lock lock(mutex_);
    step_end_.push_back(events_.size());
    metrics_.push_back(m);
  }
  if ((step + 1) % kSnapshotInterval == 0 &&
      events_.size() - snapshots_.back()->event_offset >= snapshot_min_events_) {
    take_snapshot(step);
  }
}

void Timeline::take_snapshot(int after_step) {
  auto snap = std::make_shared<Snapshot>();
  snap->after_step = after_step;
  snap->event_offset = events_.size();
  snap->state = live_;
  std::unique_lock lock(mutex_);
  snapshots_.push_back(std::move(snap));
}

int Timeline::num_steps() const {
  std::shared_lock lock(mutex_);
  return static_cast<int>(step_end_.size());
}

std::size_t Timeline::num_events() const {
  std::shared_lock lock(mutex_);
  return events_.size();
}

int Timeline::num_snapshots() const {
  std::shared_lock lock(mutex_);
  return static_cast<int>(snapshots_.size());
}

std::span<const Event> Timeline::events() const {
  std::shared_lock lock(mutex_);
  return events_.span();
}

static void check_step(int step, std::size_t num_steps) {
  if (step < 0 || static_cast<std::size_t>(step) >= num_steps) {
    throw Error("timeline", "expected a closed step in [0, " + std::to_string(num_steps) +
                                "), got " + std::to_string(step));
  }
}

std::span<const Event> Timeline::events_at(int step) const {
  std::shared_lock lock(mutex_);
  check_step(step, step_end_.size());
  const std::size_t first = step == 0 ? 0 : step_end_[static_cast<std::size_t>(step) - 1];
  return events_.span(first, step_end_[static_cast<std::size_t>(step)]);
}

const StepMetrics& Timeline::metrics(int step) const {
  std::shared_lock lock(mutex_);
  check_step(step, metrics_.size());
  return metrics_[static_cast<std::size_t>(step)];
}

std::span<const StepMetrics> Timeline::all_metrics() const {
  std::shared_lock lock(mutex_);
  return metrics_.span();
}

PoolState Timeline::state_at(int step) const {
  PoolState out;
  state_at(step, out);
  return out;
}

void Timeline::state_at(int step, PoolState& out) const {
  std::shared_ptr<const Snapshot> snap;
  std::span<const Event> replay;
  {
    std::shared_lock lock(mutex_);
    check_step(step, step_end_.size());
    auto it = std::upper_bound(
        snapshots_.begin(), snapshots_.end(), step,
        [](int s, const std::shared_ptr<const Snapshot>& p) { return s < p->after_step; });
    snap = *(it - 1);  // the first snapshot (after_step -1) always qualifies
    replay = events_.span(snap->event_offset, step_end_[static_cast<std::size_t>(step)]);
  }
  // Snapshots and published events are immutable: the rest runs without the lock.
  out.block_size = snap->state.block_size;
  out.blocks = snap->state.blocks;
  out.requests = snap->state.requests;
  for (const Event& e : replay) apply_event(out, e);
  out.step = step;
}

}  // namespace kvscope

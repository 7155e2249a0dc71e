// Adapter from the engine's Timeline to the UI's DataSource: the whole wiring to real runs.
#pragma once

#include <memory>
#include <utility>

#include "app/core/data_source.h"
#include "engine/trace/timeline.h"

namespace kvscope::ui {

class TimelineSource final : public DataSource {
 public:
  TimelineSource(std::shared_ptr<const Timeline> timeline, std::string origin)
      : timeline_(std::move(timeline)), origin_(std::move(origin)) {}
  const TimelineHeader& header() const override { return timeline_->header(); }
  int num_steps() const override { return timeline_->num_steps(); }
  std::span<const StepMetrics> all_metrics() const override { return timeline_->all_metrics(); }
  void state_at(int step, PoolState& out) const override { timeline_->state_at(step, out); }
  bool is_demo() const override { return false; }
  std::string describe() const override { return origin_; }

 private:
  std::shared_ptr<const Timeline> timeline_;
  std::string origin_;  // the scenario or recording path
};

}  // namespace kvscope::ui

// DataSource: what the UI reads about a run (header, per-step metrics, pool state at any step).
// The Timeline adapter (timeline_source.h) and the demo generator (demo/) both implement it.
#pragma once

#include <span>
#include <string>

#include "engine/trace/timeline.h"

namespace kvscope::ui {

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual const TimelineHeader& header() const = 0;
  virtual int num_steps() const = 0;                             // closed steps, >= 1
  virtual std::span<const StepMetrics> all_metrics() const = 0;  // [num_steps]
  virtual void state_at(int step, PoolState& out) const = 0;     // reuses out's storage
  virtual bool is_demo() const = 0;          // fabricated data, labelled in the UI
  virtual std::string describe() const = 0;  // one line for the title/status bar
};

}  // namespace kvscope::ui

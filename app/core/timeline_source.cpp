// TimelineSource: per-token eviction state for the text and attention panels.
#include "app/core/timeline_source.h"

#include <algorithm>

namespace kvscope::ui {

void TimelineSource::scan_evictions() const {
  const std::span<const Event> events = timeline_->events();
  for (std::size_t i = events_scanned_; i < events.size(); ++i) {
    const Event& e = events[i];
    if (e.type == EventType::kEvictedPosition && e.request >= 0 && e.logical >= 0 &&
        e.logical < (1 << 24)) {
      evictions_[e.request].push_back({e.step, e.logical});
    } else if (e.type == EventType::kPreempted &&
               e.a == static_cast<std::int64_t>(PreemptReason::kRecompute)) {
      const auto it = evictions_.find(e.request);
      if (it != evictions_.end()) it->second.push_back({e.step, -1});
    }
  }
  events_scanned_ = events.size();
}

std::vector<std::uint8_t> TimelineSource::slot_live(int request, int step) const {
  scan_evictions();
  const auto it = evictions_.find(request);
  if (it == evictions_.end()) return {};
  std::vector<std::uint8_t> live;
  for (const EvictionMark& m : it->second) {  // in event order, so in step order
    if (m.step > step) break;
    if (m.token < 0) {
      live.clear();
      continue;
    }
    const auto t = static_cast<std::size_t>(m.token);
    if (live.size() <= t) live.resize(t + 1, 1);
    live[t] = 0;
  }
  return live;
}

}  // namespace kvscope::ui

#include "engine/kv/event_payloads.h"
// TimelineSource: per-token eviction state for the text and attention panels.
#include "app/core/timeline_source.h"
#include "engine/kv/event_payloads.h"

#include <algorithm>
#include "engine/kv/event_payloads.h"

#include "engine/kv/event_payloads.h"
namespace kvscope::ui {
#include "engine/kv/event_payloads.h"

#include "engine/kv/event_payloads.h"
void TimelineSource::scan_evictions() const {
#include "engine/kv/event_payloads.h"
  const std::span<const Event> events = timeline_->events();
#include "engine/kv/event_payloads.h"
  for (std::size_t i = events_scanned_; i < events.size(); ++i) {
#include "engine/kv/event_payloads.h"
    const Event& e = events[i];
#include "engine/kv/event_payloads.h"
    if (e.type == EventType::kEvictedPosition && e.request >= 0 && e.logical >= 0 &&
#include "engine/kv/event_payloads.h"
        e.logical < (1 << 24)) {
#include "engine/kv/event_payloads.h"
      evictions_[e.request].push_back({e.step, e.logical});
#include "engine/kv/event_payloads.h"
    } else if (e.type == EventType::kPreempted &&
#include "engine/kv/event_payloads.h"
               event_as<ev::Preempted>(e).reason == PreemptReason::kRecompute) {
#include "engine/kv/event_payloads.h"
      const auto it = evictions_.find(e.request);
#include "engine/kv/event_payloads.h"
      if (it != evictions_.end()) it->second.push_back({e.step, -1});
#include "engine/kv/event_payloads.h"
    }
#include "engine/kv/event_payloads.h"
  }
#include "engine/kv/event_payloads.h"
  events_scanned_ = events.size();
#include "engine/kv/event_payloads.h"
}
#include "engine/kv/event_payloads.h"

#include "engine/kv/event_payloads.h"
std::vector<std::uint8_t> TimelineSource::slot_live(int request, int step) const {
#include "engine/kv/event_payloads.h"
  scan_evictions();
#include "engine/kv/event_payloads.h"
  const auto it = evictions_.find(request);
#include "engine/kv/event_payloads.h"
  if (it == evictions_.end()) return {};
#include "engine/kv/event_payloads.h"
  std::vector<std::uint8_t> live;
#include "engine/kv/event_payloads.h"
  for (const EvictionMark& m : it->second) {  // in event order, so in step order
#include "engine/kv/event_payloads.h"
    if (m.step > step) break;
#include "engine/kv/event_payloads.h"
    if (m.token < 0) {
#include "engine/kv/event_payloads.h"
      live.clear();
#include "engine/kv/event_payloads.h"
      continue;
#include "engine/kv/event_payloads.h"
    }
#include "engine/kv/event_payloads.h"
    const auto t = static_cast<std::size_t>(m.token);
#include "engine/kv/event_payloads.h"
    if (live.size() <= t) live.resize(t + 1, 1);
#include "engine/kv/event_payloads.h"
    live[t] = 0;
#include "engine/kv/event_payloads.h"
  }
#include "engine/kv/event_payloads.h"
  return live;
#include "engine/kv/event_payloads.h"
}
#include "engine/kv/event_payloads.h"

#include "engine/kv/event_payloads.h"
}  // namespace kvscope::ui

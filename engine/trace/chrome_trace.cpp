// Chrome trace export (chrome://tracing, ui.perfetto.dev). One step = 1 ms of trace time.
//   pid 1 "scheduler": one slice per step (prefill/decode tokens in args), instant events for
//                      preemptions and rejections, counters for free blocks and utilization.
//   pid 2 "requests":  one track per request with slices queued / running / swapped.
#include <algorithm>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/common/atomic_write.h"
#include "engine/kv/event_payloads.h"
#include "engine/trace/timeline.h"

namespace kvscope {
namespace {

constexpr std::int64_t kStepMicros = 1000;

using json = nlohmann::ordered_json;

json slice(const std::string& name, int pid, int tid, std::int64_t ts, std::int64_t dur) {
  return json{{"name", name}, {"ph", "X"}, {"pid", pid}, {"tid", tid}, {"ts", ts}, {"dur", dur}};
}

json meta(const std::string& what, int pid, int tid, const std::string& name) {
  return json{{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

// Open phase of one request: what it is doing since `since` (step).
struct OpenPhase {
  std::string name;
  std::int64_t since = 0;
};

// pid 1's per-step records: one slice with the step's token counts, two counters.
void append_step_records(std::span<const StepMetrics> ms, json& out) {
  for (const StepMetrics& m : ms) {
    const std::int64_t ts = m.step * kStepMicros;
    json s = slice("step " + std::to_string(m.step), 1, 0, ts, kStepMicros);
    s["args"] = {{"prefill_tokens", m.prefill_tokens},
                 {"decode_tokens", m.decode_tokens},
                 {"running", m.requests_running},
                 {"waiting", m.requests_waiting}};
    out.push_back(std::move(s));
    out.push_back(json{{"name", "free blocks"},
                       {"ph", "C"},
                       {"pid", 1},
                       {"ts", ts},
                       {"args", {{"free", m.free_blocks}, {"used", m.blocks_used}}}});
    out.push_back(json{{"name", "utilization %"},
                       {"ph", "C"},
                       {"pid", 1},
                       {"ts", ts},
                       {"args", {{"filled/allocated", 100.0 * m.utilization()}}}});
  }
}

// pid 2's request tracks (one slice per phase) and pid 1's instant events, from the events of
// `steps` steps; a phase still open at the end closes at step `steps`.
class RequestTracks {
 public:
  explicit RequestTracks(json& out) : out_(out) {}

  void add(const Event& e) {
    switch (e.type) {
      case EventType::kRequestArrived:
        out_.push_back(
            meta("thread_name", 2, e.request + 1, "request " + std::to_string(e.request)));
        begin(e.request, "queued", e.step);
        break;
      case EventType::kAdmitted:
        begin(e.request, "running", e.step);
        break;
      case EventType::kSwappedIn:
        begin(e.request, "running", e.step);
        break;
      case EventType::kSwappedOut:
        begin(e.request, "swapped", e.step);
        break;
      case EventType::kPreempted:
        instant("preempt request " + std::to_string(e.request), e);
        if (event_as<ev::Preempted>(e).reason == PreemptReason::kRecompute) {
          begin(e.request, "queued (preempted)", e.step);
        }
        break;
      case EventType::kRequestFinished:
        close(e.request, e.step + 1);
        break;
      case EventType::kRequestRejected:
        instant("reject request " + std::to_string(e.request), e);
        close(e.request, e.step);
        break;
      default:
        break;
    }
  }

  void close_all(std::int64_t step) {
    while (!open_.empty()) close(open_.begin()->first, step);
  }

 private:
  void close(std::int32_t req, std::int64_t step) {
    auto it = open_.find(req);
    if (it == open_.end()) return;
    const std::int64_t dur = std::max<std::int64_t>(1, (step - it->second.since) * kStepMicros);
    out_.push_back(slice(it->second.name, 2, req + 1, it->second.since * kStepMicros, dur));
    open_.erase(it);
  }
  void begin(std::int32_t req, const std::string& name, std::int64_t step) {
    close(req, step);
    open_[req] = {name, step};
  }
  void instant(const std::string& name, const Event& e) {
    out_.push_back(json{{"name", name},
                        {"ph", "i"},
                        {"s", "g"},
                        {"pid", 1},
                        {"tid", 0},
                        {"ts", e.step * kStepMicros},
                        {"args", {{"request", e.request}}}});
  }

  json& out_;
  std::map<std::int32_t, OpenPhase> open_;  // request -> current phase
};

}  // namespace

void Timeline::export_chrome_trace(const std::string& path) const {
  const int steps = num_steps();
  std::span<const StepMetrics> ms = all_metrics().subspan(0, static_cast<std::size_t>(steps));
  json out = json::array();
  out.push_back(meta("process_name", 1, 0, "scheduler (" + header_.allocator + ")"));
  out.push_back(meta("thread_name", 1, 0, "steps"));
  out.push_back(meta("process_name", 2, 0, "requests"));
  append_step_records(ms, out);
  std::span<const Event> evs;
  {
    std::shared_lock lock(mutex_);
    evs = events_.span(0, steps == 0 ? 0 : step_end_[static_cast<std::size_t>(steps) - 1]);
  }
  RequestTracks tracks(out);
  for (const Event& e : evs) tracks.add(e);
  tracks.close_all(steps);
  json doc = {{"displayTimeUnit", "ms"},
              {"traceEvents", std::move(out)},
              {"otherData",
               {{"title", header_.title},
                {"allocator", header_.allocator},
                {"kv_format", header_.kv_format},
                {"step_us", kStepMicros}}}};
  write_file_atomically(path, [&](std::ostream& o) { o << doc.dump() << '\n'; });
}

}  // namespace kvscope

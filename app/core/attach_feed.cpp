// AttachFeed: the worker that follows a live KV-event stream for the UI.
#include "app/core/attach_feed.h"

#include <algorithm>
#include <chrono>

#include "engine/common/error.h"
#include "present/attach_report.h"

namespace kvscope::ui {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kPollMs = 50;                 // the worker checks its stop flag this often
constexpr double kPublishSeconds = 0.2;     // snapshots (and samples) five times a second
constexpr std::size_t kSharedPrefixes = 8;  // rows of the deepest-shared-prefixes table

TimelineHeader live_header(const AttachRequest& r) {
  TimelineHeader h;
  h.num_blocks = r.slots;
  h.block_size = 16;  // the engines' own size is learnt from the first BlockStored (panel shows it)
  h.title = (r.bind ? "listening at " : "attached to ") + r.endpoint;
  h.allocator = "engine prefix cache (live KV events)";
  return h;
}

}  // namespace

AttachFeed::AttachFeed(const AttachRequest& request, std::shared_ptr<std::atomic<bool>> running)
    : request_(request), running_(std::move(running)) {
  if (request_.slots < 16 || request_.slots > (1 << 20))
    fail_expected("attach: slots", "an integer in [16, 1048576]", std::to_string(request_.slots));
  KvAttachConfig cfg;
  cfg.endpoint = request_.endpoint;
  cfg.replay_endpoint = request_.replay;
  cfg.topic = request_.topic;
  cfg.dp_ranks = request_.dp;
  cfg.bind = request_.bind;
  cfg.model.max_live_blocks = static_cast<std::size_t>(request_.slots);
  cfg.model.max_recorded_events = request_.max_recorded_events;
  cfg.model.max_recorded_batches = request_.max_recorded_batches;
  client_ = std::make_unique<KvEventClient>(cfg);  // throws for bad endpoints, ports in use
  timeline_ = std::make_shared<Timeline>(live_header(request_));
  StepMetrics first;  // step 0: the moment of attach, nothing known yet
  first.blocks_total = request_.slots;
  first.free_blocks = request_.slots;
  first.largest_free_run = request_.slots;
  timeline_->end_step(first);
  publish(0.0);
  *running_ = true;
  worker_ = std::thread([this] { work(); });
}

AttachFeed::~AttachFeed() {
  stop();
}

void AttachFeed::stop() {
  stop_ = true;
  if (worker_.joinable()) worker_.join();
}

std::shared_ptr<const AttachSnapshot> AttachFeed::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return snapshot_;
}

std::optional<std::string> AttachFeed::take_error() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::optional<std::string> e = std::move(error_);
  error_.reset();
  return e;
}

void AttachFeed::work() {
  const Clock::time_point start = Clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  double next_publish = kPublishSeconds;
  try {
    while (!stop_.load(std::memory_order_relaxed)) {
      client_->poll(kPollMs);
      // Step k + 1 of the timeline is recorded batch k (step 0 is the attach).
      appended_ = client_->model().append_steps(*timeline_, appended_);
      if (seconds() >= next_publish) {
        publish(seconds());
        next_publish = seconds() + kPublishSeconds;
      }
    }
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = "attach " + request_.endpoint + ": stopped: " + e.what();
  }
  try {
    publish(seconds());  // the state at detach
  } catch (...) {
    // The last snapshot stays as it was (an error that stopped the loop may stop this too).
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto last = std::make_shared<AttachSnapshot>(*snapshot_);
    last->stopped = true;
    snapshot_ = std::move(last);
    if (client_) detached_ = std::make_unique<KvEventModel>(client_->model());
  }
  // Detached: close the sockets, so nothing queues behind the view and a bound port is free.
  client_.reset();
  *running_ = false;
}

void AttachFeed::set_lookup(std::optional<KvLookupQuery> query) {
  std::lock_guard<std::mutex> lock(mutex_);
  lookup_ = std::move(query);
  if (!detached_) return;  // the worker answers it in its next snapshot
  auto s = std::make_shared<AttachSnapshot>(*snapshot_);
  s->lookup = lookup_;
  s->lookup_rows = lookup_ ? detached_->lookup(*lookup_) : std::vector<KvLookupRow>{};
  snapshot_ = std::move(s);
}

void AttachFeed::sample(double seconds) {
  const KvEventModel& model = client_->model();
  AttachSample s;
  s.batches = client_->totals().batches;
  s.seconds = seconds;
  if (s.batches != last_batches_) {
    last_batches_ = s.batches;
    last_batch_seconds_ = seconds;
  }
  for (const auto& [rm, n] : model.live_by_rank_medium()) {
    auto it = std::find(series_.begin(), series_.end(), rm);
    if (it == series_.end()) {
      series_.push_back(rm);
      it = series_.end() - 1;
    }
    const auto index = static_cast<std::size_t>(it - series_.begin());
    if (s.live.size() <= index) s.live.resize(index + 1, 0);
    s.live[index] = n;
  }
  const KvModelCounters& c = model.totals();
  s.stored = c.blocks_stored;
  s.removed = c.blocks_removed + c.blocks_cleared;
  s.short_lived = c.short_lived;
  // Every n-th sample is kept; the newest state is always the last one (replaced until kept).
  const bool keep = sample_count_++ % sample_stride_ == 0;
  if (head_is_extra_ && !samples_.empty())
    samples_.back() = std::move(s);
  else
    samples_.push_back(std::move(s));
  head_is_extra_ = !keep;
  if (keep && samples_.size() >= kMaxAttachSamples) {
    // Halve the resolution: keep every other sample (the first and the newest stay).
    std::vector<AttachSample> kept;
    kept.reserve(samples_.size() / 2 + 1);
    for (std::size_t i = 0; i < samples_.size(); i += 2) kept.push_back(std::move(samples_[i]));
    if (samples_.size() % 2 == 0) kept.push_back(std::move(samples_.back()));
    samples_ = std::move(kept);
    sample_stride_ *= 2;
  }
}

void AttachFeed::publish(double seconds) {
  sample(seconds);
  const KvEventModel& model = client_->model();
  auto s = std::make_shared<AttachSnapshot>();
  s->endpoint = request_.endpoint;
  s->bind = request_.bind;
  s->seconds = seconds;
  KvAttachStatus status = client_->status();
  s->status_line = kv_attach_status_line(status, model);
  s->ranks = std::move(status.ranks);
  for (const KvRankStats& r : s->ranks) {
    const auto it = model.by_rank().find(r.rank);
    s->rank_live.push_back(it == model.by_rank().end() ? 0 : it->second.live);
  }
  s->totals = std::move(status.totals);
  s->last_batch_seconds = last_batch_seconds_;
  s->counters = model.totals();
  s->block_size = model.block_size();
  s->series = series_;
  s->samples = samples_;
  s->loras = model.by_lora();
  s->shared_prefixes = model.deepest_shared_prefixes(kSharedPrefixes);
  s->recording_truncated = model.recording_truncated();
  s->recorded_batches = model.recorded_batches();
  s->slots = request_.slots;
  s->media_groups = model.live_by_rank_medium_group();
  s->groups = model.groups();
  s->clear_scope = model.clear_scope();
  s->engine = model.engine_guess();
  s->last_ts = model.last_ts();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    s->lookup = lookup_;
  }
  if (s->lookup) s->lookup_rows = model.lookup(*s->lookup);  // O(live blocks): 5 times a second
  std::lock_guard<std::mutex> lock(mutex_);
  snapshot_ = std::move(s);
}

}  // namespace kvscope::ui

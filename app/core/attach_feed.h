// AttachFeed: kvscope-ui attached live to a vLLM / SGLang KV-cache event stream (File > Attach,
// or `kvscope-ui --attach`). A worker thread owns the KvEventClient (engine/trace): it polls the
// sockets, appends every batch to a live Timeline as one step (step 0 is the moment of attach),
// so the block map, the prefix tree and the scrubber work as for any run, and publishes a
// snapshot of the counters about five times a second for the Live attach panel and the status bar.
//
// MEMORY stays bounded however long it runs: the Timeline and the model's recording stop growing
// at AttachRequest::max_recorded_events / max_recorded_batches (then the counters and plots go
// on, the scrubber stops: the panel says so); the over-time samples are halved in resolution
// whenever they reach kMaxAttachSamples; the live block map is capped at `slots` blocks (stores
// past it are counted as untracked). Detaching closes the sockets (nothing queues up behind a
// detached view, and a bound port is free again).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/trace/kv_event_client.h"
#include "engine/trace/timeline.h"

namespace kvscope::ui {

// What File > Attach asks for (the fields of `kvscope attach`).
struct AttachRequest {
  std::string endpoint;  // rank 0's publisher (or, with bind, where to listen)
  std::string replay;    // rank 0's replay socket; "" = none
  std::string topic;     // "" = every topic
  int dp = 1;
  bool bind = false;
  int slots = 65536;  // live blocks shown (the block map's size); more are counted as untracked
  std::size_t max_recorded_events = 2'000'000;  // the scrubbable history (40 bytes each, twice)
  std::size_t max_recorded_batches = 500'000;   // its steps (~150 bytes each with their metrics)
};

inline constexpr std::size_t kMaxAttachSamples = 4096;

// The counters at one moment, for the plots over time.
struct AttachSample {
  std::int64_t batches = 0;        // batches applied by then (= the Timeline's step until the
                                   // history is full; it goes on counting after)
  double seconds = 0.0;            // since attach
  std::vector<std::int64_t> live;  // per AttachSnapshot::series (later series: absent = 0)
  std::int64_t stored = 0;         // cumulative blocks stored
  std::int64_t removed = 0;        // cumulative blocks removed (BlockRemoved) and cleared
  std::int64_t short_lived = 0;    // cumulative removals within 1 s of the store (churn)
};

struct AttachSnapshot {
  std::string endpoint;
  bool bind = false;
  bool stopped = false;  // detached (the recording stays for scrubbing and saving)
  double seconds = 0.0;  // since attach
  std::string status_line;
  std::vector<KvRankStats> ranks;
  std::vector<std::int64_t> rank_live;  // [rank] live blocks now
  KvRankStats totals;
  double last_batch_seconds = -1.0;  // since attach, when the last batch came (-1: none yet)
  KvModelCounters counters;
  std::int64_t block_size = 0;
  std::vector<std::pair<int, std::string>> series;  // (rank, medium), in order of appearance
  std::vector<AttachSample> samples;  // oldest first; the last one is always the newest state
  std::map<std::string, KvLoraCount> loras;
  std::vector<KvSharedPrefix> shared_prefixes;  // the deepest few
  // Live blocks per (rank, medium, group): remote blocks are media of their own ("GPU (remote)").
  std::map<std::tuple<int, std::string, std::int64_t>, std::int64_t> media_groups;
  std::map<std::int64_t, KvGroupInfo> groups;
  KvClearScope clear_scope = KvClearScope::kAuto;
  KvEngineGuess engine = KvEngineGuess::kUnknown;
  // The lookup asked for (AttachFeed::set_lookup), answered against this snapshot's state.
  std::optional<KvLookupQuery> lookup;
  std::vector<KvLookupRow> lookup_rows;
  double last_ts = 0.0;  // the engine's timestamp of the last batch (for the rows' sentences)
  bool recording_truncated = false;
  std::size_t recorded_batches = 0;
  int slots = 0;
};

class AttachFeed {
 public:
  // Opens the sockets on the calling thread (a bad endpoint or a port in use throws
  // kvscope::Error naming it), then starts the worker. `running` is cleared when it stops.
  AttachFeed(const AttachRequest& request, std::shared_ptr<std::atomic<bool>> running);
  ~AttachFeed();  // stops and joins the worker
  AttachFeed(const AttachFeed&) = delete;
  AttachFeed& operator=(const AttachFeed&) = delete;

  std::shared_ptr<const Timeline> timeline() const { return timeline_; }
  // The latest snapshot (never null).
  std::shared_ptr<const AttachSnapshot> snapshot() const;
  // Detaches: the worker stops polling and publishes a last snapshot. Idempotent.
  void stop();
  // "Why did my prefix miss?": from now on every snapshot answers this lookup (nullopt: none).
  // After detach it is answered at once, against the state at detach.
  void set_lookup(std::optional<KvLookupQuery> query);
  // An exception the worker caught (once).
  std::optional<std::string> take_error();

 private:
  void work();
  void sample(double seconds);
  void publish(double seconds);

  AttachRequest request_;
  std::unique_ptr<KvEventClient> client_;   // the worker's, once it started
  std::unique_ptr<KvEventModel> detached_;  // the model at detach (lookups after it)
  std::shared_ptr<Timeline> timeline_;
  std::size_t appended_ = 0;  // recorded batches already in the timeline
  std::vector<std::pair<int, std::string>> series_;
  std::vector<AttachSample> samples_;
  int sample_stride_ = 1;  // keep every n-th sample after halving
  int sample_count_ = 0;
  bool head_is_extra_ = false;  // the last sample is the newest state, not a kept one
  std::int64_t last_batches_ = 0;
  double last_batch_seconds_ = -1.0;
  std::shared_ptr<std::atomic<bool>> running_;
  std::atomic<bool> stop_{false};
  std::thread worker_;
  mutable std::mutex mutex_;  // guards snapshot_, error_, lookup_ and detached_
  std::optional<KvLookupQuery> lookup_;
  std::shared_ptr<const AttachSnapshot> snapshot_;
  std::optional<std::string> error_;
};

}  // namespace kvscope::ui

// Timeline: the append-only record of a run, indexed by step. It stores every Event and one
// StepMetrics per step, and reconstructs the full pool state at any step (snapshots every
// kSnapshotInterval steps + replay of the events since), fast enough to scrub 100k blocks per
// frame.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

#include "engine/kv/events.h"
#include "engine/trace/stable_vector.h"
#include "engine/trace/token_text.h"

namespace kvscope {

// Per-step figures, computed in engine/analysis (unit-tested there), shown by the UI and reports.
struct StepMetrics {
  std::int32_t step = 0;
  std::int32_t blocks_total = 0;
  std::int32_t blocks_used = 0;              // referenced by at least one sequence
  std::int32_t blocks_cached_free = 0;       // free but still holding a reusable cached prefix
  std::int64_t slots_allocated = 0;          // token slots in used blocks (or reserved, contiguous)
  std::int64_t slots_filled = 0;             // slots holding a token (token-level occupancy)
  std::int64_t internal_frag_slots = 0;      // empty slots in the last, partially filled block
  std::int64_t reservation_waste_slots = 0;  // contiguous: reserved beyond the last used block
  std::int32_t largest_free_run = 0;         // longest run of consecutive free blocks
  std::int32_t free_blocks = 0;
  std::int32_t requests_waiting = 0;
  std::int32_t requests_running = 0;
  std::int32_t requests_swapped = 0;
  std::int32_t requests_finished = 0;
  std::int32_t requests_rejected = 0;
  std::int64_t preemptions = 0;        // cumulative
  std::int64_t tokens_recomputed = 0;  // cumulative (recompute preemption)
  std::int64_t prefill_tokens = 0;     // this step
  std::int64_t decode_tokens = 0;      // this step
  std::int64_t prefix_hit_tokens = 0;  // cumulative prompt tokens served from the prefix cache
  std::int64_t prompt_tokens = 0;      // cumulative prompt tokens of admitted requests
  std::int64_t kv_bytes_used = 0;      // slots_allocated x exact bytes per token
  double utilization() const {         // filled / allocated token slots
    return slots_allocated == 0 ? 1.0 : static_cast<double>(slots_filled) / slots_allocated;
  }
  double external_fragmentation() const {  // 1 - largest free run / free blocks
    return free_blocks == 0 ? 0.0 : 1.0 - static_cast<double>(largest_free_run) / free_blocks;
  }
};

enum class BlockStatus : std::uint8_t { kFree, kOwned, kShared, kCachedFree, kPinned };
inline constexpr std::size_t kNumBlockStatuses = static_cast<std::size_t>(BlockStatus::kPinned) + 1;

// What one physical block holds at a given step.
struct BlockState {
  std::int32_t owner = -1;    // request id of the (first) owner, -1 when free
  std::int32_t logical = -1;  // logical block index in the owner's table
  std::int16_t ref_count = 0;
  std::int16_t filled = 0;  // slots holding tokens (0..block_size)
  BlockStatus status = BlockStatus::kFree;
  bool cached = false;  // the prefix cache holds one of ref_count (kCachedFree when alone)
  // Its bytes were reloaded from a KV tier instead of computed: the tier's medium (0 = host RAM,
  // 1 = disk), -1 otherwise.
  std::int8_t reloaded_from = -1;
  // The hybrid layer group it belongs to (BlockGrouped; 0: the first, full attention).
  std::int8_t group = 0;
};

// Per request, at a given step.
enum class RequestPhase : std::uint8_t { kWaiting, kRunning, kSwapped, kFinished, kRejected };
inline constexpr std::size_t kNumRequestPhases =
    static_cast<std::size_t>(RequestPhase::kRejected) + 1;
// "waiting", "running", "swapped", "finished", "rejected".
const char* request_phase_name(RequestPhase phase);
struct RequestState {
  std::int32_t id = -1;
  RequestPhase phase = RequestPhase::kWaiting;
  std::int32_t num_tokens = 0;       // tokens in its KV cache
  std::vector<std::int32_t> blocks;  // its block table (physical ids)
};

// A hybrid layer group as its BlockGrouped events describe it (engine/kv/layer_groups.h).
struct LayerGroupSeen {
  std::int8_t kind = 0;  // 0 full attention, 1 sliding window, 2 state
  std::int32_t window = 0;
  bool operator==(const LayerGroupSeen&) const = default;
};

struct PoolState {
  std::int32_t step = 0;
  std::int32_t block_size = 0;
  std::vector<BlockState> blocks;      // [num_blocks]
  std::vector<RequestState> requests;  // every request seen so far, by id order
  // Hybrid runs: the layer groups seen so far (empty: one group; [0] full attention unless a
  // BlockGrouped event said otherwise).
  std::vector<LayerGroupSeen> groups;
};

struct TimelineHeader {
  std::int32_t num_blocks = 0;
  std::int32_t block_size = 0;
  std::string title;      // scenario title
  std::string allocator;  // "paged" / "contiguous"
  std::string kv_format;  // e.g. "fp32" or "k=int8,v=int4"
  double kv_bytes_per_token = 0.0;
  bool random_weights = false;
  // The text of the run's token ids and its prompts (a scenario run: its tokenizer's; a loaded
  // recording: the pieces it carries); null when there is none (ids shown). Immutable, shared.
  std::shared_ptr<const TokenText> text;
};

// THREADING: one writer (the thread running the Simulator: emit, end_step) and any number of
// readers (the UI render thread, exporters) may use one Timeline at the same time. Every method is
// safe to call concurrently with the writer; a std::shared_mutex guards publication.
// What readers get back:
//   - events(), events_at(), all_metrics() spans and metrics() references point into append-only
//     storage that never moves or changes (StableVector): they stay valid and unchanged for the
//     Timeline's lifetime; they cover what was published when called (later steps are not in them).
//   - header() is immutable after construction.
//   - state_at() returns (or fills) the caller's own copy.
// Moving a Timeline (load returns one) is not thread-safe: do it before sharing it.
class Timeline : public EventSink {
 public:
  static constexpr int kSnapshotInterval = 64;

  explicit Timeline(TimelineHeader header);
  const TimelineHeader& header() const { return header_; }

  void emit(const Event& event) override;     // appends to the current step
  void end_step(const StepMetrics& metrics);  // closes the current step
  int num_steps() const;                      // closed steps

  std::span<const Event> events() const;  // all events
  std::span<const Event> events_at(int step) const;
  const StepMetrics& metrics(int step) const;
  std::span<const StepMetrics> all_metrics() const;

  // Pool and request state after `step` closed. O(blocks + events since the last snapshot).
  PoolState state_at(int step) const;
  // Same, reusing `out`'s storage (for the UI, every frame).
  void state_at(int step, PoolState& out) const;

  // Versioned binary recording, written atomically; load throws kvscope::Error on bad files. With
  // a header text, the recording carries the decoded piece of every token id it uses (prompts and
  // sampled tokens) and the prompts: see docs/recording-format.md.
  void save(const std::string& path) const;
  static Timeline load(const std::string& path);
  // Chrome trace JSON (Perfetto): request spans, step slices, free-block and utilization counters.
  void export_chrome_trace(const std::string& path) const;

  Timeline(Timeline&& other) noexcept;
  Timeline& operator=(Timeline&& other) noexcept;
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;
  ~Timeline() override;

  std::size_t num_events() const;
  int num_snapshots() const;
  // The writer's running state: the pool after every event emitted so far (writer thread only).
  const PoolState& live_state() const { return live_; }

 private:
  struct Snapshot {
    std::int32_t after_step = -1;  // state after this step closed (-1: before step 0)
    std::size_t event_offset = 0;  // events [0, event_offset) are folded into `state`
    PoolState state;
  };
  void take_snapshot(int after_step);

  mutable std::shared_mutex mutex_;  // guards the sizes and pointers below (not live_)
  TimelineHeader header_;
  StableVector<Event> events_;
  StableVector<std::uint64_t> step_end_;  // [num_steps] one past each step's last event
  StableVector<StepMetrics> metrics_;     // [num_steps]
  std::vector<std::shared_ptr<const Snapshot>> snapshots_;  // by after_step, first at -1
  PoolState live_;                                          // writer only
  std::size_t snapshot_min_events_ = 0;  // skip a snapshot when fewer events happened since
};

}  // namespace kvscope

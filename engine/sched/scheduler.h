// Scheduler: the Simulator's bookkeeping, without weights. It keeps every request's progress and
// the waiting / running / swapped queues, and each step builds the plan of which requests run how
// many tokens: grow the running ones (preempting victims when the pool is full), swap requests
// back in, admit waiting ones FCFS (on a cached prefix, reloading from the KV tiers what they
// hold), all within the per-step token budget. After the step's forward it records what was
// computed and appends each sampled token. It never runs a model: a KvCacheManager without
// storage, a swap space without bytes and no executor are enough to drive and test it (tokens
// "sampled" by the caller).
//
// What it does not own: the cache, prefix cache, tiers and swap space (the Simulator's, shared
// with the executor) and per-sequence state beside the cache, such as token evictors, which a
// SequenceListener creates and drops when it is told.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/kv/event_payloads.h"
#include "engine/prefix/prefix_cache.h"
#include "engine/sched/sim_config.h"
#include "engine/tiers/host_tier.h"
#include "engine/tiers/kv_tiers.h"
#include "engine/trace/timeline.h"

namespace kvscope {

// One request's progress, readable between steps.
struct RequestRun {
  std::int32_t id = 0;
  SimRequest spec;
  bool arrived = false;
  RequestPhase phase = RequestPhase::kWaiting;
  std::vector<int> tokens;       // prompt then generated tokens
  int num_computed = 0;          // tokens whose K/V is in the cache (or host tier when swapped)
  int high_water = 0;            // most tokens ever computed (beyond that nothing is recomputed)
  int generated = 0;             // tokens sampled
  std::int64_t admit_order = 0;  // increases on every admission or swap-in (victim: last admitted)
  std::vector<int> host_slots;   // swap tier slots while swapped
  int preemptions = 0;
  std::optional<int> admitted_step;
  std::optional<int> finished_step;
  std::string reject_reason;  // why it was rejected, in one sentence
  std::int32_t fork_of = -1;  // parallel sample forked from this request after its prefill
  std::vector<std::int32_t> fork_children;  // samples to fork off this one (prefix caching)
  bool forked = false;                      // fork_children were forked
  bool held = false;      // finished, its blocks still allocated (SimRequest::hold_blocks)
  int cached_blocks = 0;  // full blocks already offered to the prefix cache
  // A decode instance's cached prefix, mapped before the request is delivered
  // (Scheduler::reserve_prefix) so that it stays cached; its admission frees it and looks the
  // prompt up again, finding that prefix and whatever was cached since.
  bool reserved = false;
  int reserved_tokens = 0;  // of its prompt, in whole blocks (what the reservation's table holds)
  std::int64_t prefix_hit_tokens =
      0;                              // prompt tokens mapped from the prefix cache (all admissions)
  std::int64_t tier_hit_tokens = 0;   // prompt tokens reloaded from the KV tiers (all admissions)
  double tier_load_seconds = 0.0;     // the time those reloads took, measured
  double tier_exposed_seconds = 0.0;  // of it, what admission waited for (not hidden by prefetch)
  std::vector<int> generated_tokens() const {
    return {tokens.begin() + static_cast<std::ptrdiff_t>(spec.prompt_tokens.size()), tokens.end()};
  }
  // Known tokens whose K/V is not computed yet.
  int pending() const { return static_cast<int>(tokens.size()) - num_computed; }
};

// What one step runs: per request, how many of its next tokens.
struct StepPlan {
  struct Entry {
    std::int32_t id;
    int tokens;
    int reserved_blocks = 0;  // token eviction: blocks held back for the executor's appends
  };
  std::vector<Entry> entries;
  int budget = 0;           // tokens the step may still take
  int reserved_blocks = 0;  // sum over the entries: not allocatable by later requests this step
  bool preempted = false;
  std::int64_t prefill_tokens = 0;  // filled in as the entries are recorded
  std::int64_t decode_tokens = 0;
};

// Told when a request gains or loses its sequence in the cache, for state kept beside it.
class SequenceListener {
 public:
  virtual ~SequenceListener() = default;
  // The request was admitted into a fresh sequence (not on a cached prefix).
  virtual void on_sequence_started(const RequestRun& r) = 0;
  // The request's sequence is about to be freed: it finished or was preempted by recompute.
  virtual void on_sequence_dropped(std::int32_t id) = 0;
  // CacheBlend: the request's first `tokens` slots (its chunks) were appended at admission; the
  // listener fills them (SimConfig::blend). Bookkeeping listeners have nothing to fill.
  virtual void on_blend(const RequestRun& r, int tokens) {
    static_cast<void>(r);
    static_cast<void>(tokens);
  }
  // The request's slots [from, to) were appended at admission for K/V that comes from elsewhere
  // (SimRequest::kv_in_tokens; `from` is the cached prefix before them, whole blocks); the
  // listener fills them.
  virtual void on_kv_in(const RequestRun& r, int from, int to) {
    static_cast<void>(r);
    static_cast<void>(from);
    static_cast<void>(to);
  }
};

class Scheduler {
 public:
  // What it schedules over. All outlive the scheduler; `prefix` and `tiers` may be null, `events`
  // too (nothing recorded). `step` is the step counter the caller advances.
  struct Parts {
    KvCacheManager* cache = nullptr;
    PrefixCache* prefix = nullptr;
    KvTiers* tiers = nullptr;
    HostKvTier* swap = nullptr;
    EventSink* events = nullptr;
    const int* step = nullptr;
  };
  // `requests` are valid (the Simulator checks them); parallel samples (n > 1) become
  // consecutive ids, and with prefix caching all but the first fork off it after its prefill.
  // `context`: the model's context length in tokens.
  Scheduler(const SimConfig& config, int context, Parts parts, std::vector<SimRequest> requests);
  void set_listener(SequenceListener* listener) { listener_ = listener; }

  // Queues the requests whose arrival step has come; rejects those that can never fit.
  void arrive();
  // Queues request `id`, which waits for this (SimRequest::external_arrival), as arrive() does.
  // Throws InternalError for any other request, or one delivered already.
  void deliver(std::int32_t id);
  // Frees the blocks a finished request holds (SimRequest::hold_blocks). Throws InternalError when
  // it holds none.
  void release(std::int32_t id);
  // A decode instance's prefix cache: maps the longest cached prefix of request `id`'s prompt into
  // its sequence now, before it is delivered, so that those blocks stay put (a reference each)
  // while the rest of its K/V crosses; returns the blocks mapped (0: a miss, or a reservation
  // refused so that the pool can still admit the largest request). Its admission looks the prompt
  // up again and takes K/V from elsewhere for the tokens after the hit. Throws InternalError unless
  // prefix caching is on and `id` waits for delivery, takes K/V from elsewhere and has reserved
  // nothing yet.
  int reserve_prefix(std::int32_t id);
  // Something to run now: a request waiting, running or swapped out.
  bool has_work() const { return !waiting_.empty() || !running_.empty() || !swapped_.empty(); }
  // This step's plan. The cache holds slots for every planned token (with token eviction they
  // are reserved instead: the executor appends them one at a time).
  StepPlan schedule();
  // Records that `entry`'s tokens were computed. True when the request's known tokens are all in
  // the cache, so it samples its next token now.
  bool record_computed(StepPlan& plan, const StepPlan::Entry& entry);
  // The parallel samples to fork off `lead` now (before its first sampled token), else none.
  std::vector<std::int32_t> forks_due(RequestRun& lead);
  // Forks `child` off `lead`: it shares lead's blocks and runs from here.
  void fork(const RequestRun& lead, std::int32_t child);
  // Appends a sampled token; finishes the request on `stop` or at max_new_tokens.
  void append_token(RequestRun& r, int token, bool stop);
  // The scheduler's part of a step's metrics (queues and counters).
  void fill_metrics(StepMetrics& m) const;

  // Every request arrived (or was delivered) and finished or was rejected; held blocks aside.
  bool done() const;
  int num_requests() const { return static_cast<int>(requests_.size()); }
  const RequestRun& request(int id) const { return requests_.at(static_cast<std::size_t>(id)); }
  RequestRun& request(int id) { return requests_.at(static_cast<std::size_t>(id)); }
  const std::vector<RequestRun>& requests() const { return requests_; }
  // Prompt tokens actually run through the model (prefill and recompute), over the whole run.
  std::int64_t prefill_tokens_computed() const { return prefill_total_; }

  // Throws InternalError on the first inconsistency between the queues, the request phases, the
  // cache's sequences and the swap space.
  void check_invariants() const;

 private:
  // scheduler.cpp
  std::optional<RejectReason> check_fits(RequestRun& r, int* blocks_needed) const;
  int blocks_bound_evicting(int kv_tokens) const;
  void grow_running(StepPlan& w);
  void swap_in(StepPlan& w);
  void admit(StepPlan& w);
  [[nodiscard]] bool plan_tokens(StepPlan& w, RequestRun& r);
  std::int32_t pick_victim() const;
  void preempt(std::int32_t id, StepPlan& w);
  void finish(RequestRun& r);
  void queue_arrival(RequestRun& r);
  // Blocks this step's later requests may still take.
  int allocatable(const StepPlan& w) const { return cache_.num_allocatable() - w.reserved_blocks; }
  bool has_room_to_run() const {
    return config_.max_running <= 0 || static_cast<int>(running_.size()) < config_.max_running;
  }
  int now() const { return *step_; }
  template <class Payload>
  void emit(const Payload& p) {
    if (events_ != nullptr) events_->emit(to_event(p, now()));
  }
  // scheduler_prefix.cpp
  bool prefix_admission_fits(const RequestRun& r, int budget) const;
  void start_sequence(RequestRun& r);
  // At a first admission, appends the slots of K/V that comes from elsewhere past what the
  // request has computed (SimRequest::kv_in_tokens) and has the listener fill them.
  void receive_kv(RequestRun& r);
  // Reloads what it can of the tiers' run after `hit_blocks` into fresh blocks appended to the
  // sequence; tokens reloaded.
  int reload_from_tiers(RequestRun& r, int hit_blocks);
  void cache_full_blocks(RequestRun& r);

  const SimConfig& config_;
  int context_;      // the model's context length (tokens)
  int reservation_;  // contiguous: tokens reserved per request
  KvCacheManager& cache_;
  PrefixCache* prefix_;
  KvTiers* tiers_;
  HostKvTier& swap_;
  EventSink* events_;
  const int* step_;
  SequenceListener* listener_ = nullptr;
  std::vector<RequestRun> requests_;         // by id
  std::vector<std::int32_t> arrival_order_;  // ids by (arrival_step, id)
  std::size_t next_arrival_ = 0;
  std::deque<std::int32_t> waiting_;   // FCFS; recompute-preempted requests go to the front
  std::vector<std::int32_t> running_;  // in admission order
  std::vector<std::int32_t> swapped_;  // in swap-out order
  int num_finished_ = 0;
  int num_undelivered_ = 0;  // external arrivals not delivered yet
  int num_held_ = 0;         // finished requests holding their blocks
  int num_rejected_ = 0;
  std::int64_t admit_counter_ = 0;
  std::int64_t preemptions_ = 0;
  std::int64_t tokens_recomputed_ = 0;
  std::int64_t prompt_tokens_ = 0;
  std::int64_t prefix_hit_tokens_ = 0;
  std::int64_t prefill_total_ = 0;
};

}  // namespace kvscope

// Simulator: continuous batching over a real KV cache and the real model. Each step() admits
// waiting requests when blocks allow (FCFS), runs prefill (optionally chunked by a per-step token
// budget) for new ones and one decode token for running ones, all of the step's tokens in one
// Transformer::forward_step over the cache's KvSeqViews, retires finished requests, preempts
// (recompute or swap) when the pool is full, and appends events + metrics to a Timeline. The KV
// tiers behind the prefix cache are their own layer (engine/tiers/kv_tiers.h).
//
// THREADING: step() and run() are the Timeline's writer; call them from one thread. Other threads
// may read timeline() at any time (see Timeline). Everything else here is for the stepping thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/infer/transformer.h"
#include "engine/kv/event_payloads.h"
#include "engine/prefix/prefix_cache.h"
#include "engine/sched/sim_config.h"
#include "engine/tiers/host_tier.h"
#include "engine/tiers/kv_tiers.h"
#include "engine/trace/timeline.h"

namespace kvscope {

class EvictingCacheHook;

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
  int cached_blocks = 0;                    // full blocks already offered to the prefix cache
  std::int64_t prefix_hit_tokens =
      0;                              // prompt tokens mapped from the prefix cache (all admissions)
  std::int64_t tier_hit_tokens = 0;   // prompt tokens reloaded from the KV tiers (all admissions)
  double tier_load_seconds = 0.0;     // the time those reloads took, measured
  double tier_exposed_seconds = 0.0;  // of it, what admission waited for (not hidden by prefetch)
  std::vector<int> generated_tokens() const {
    return {tokens.begin() + static_cast<std::ptrdiff_t>(spec.prompt_tokens.size()), tokens.end()};
  }
};

class Simulator {
 public:
  // Throws kvscope::Error on an impossible configuration or malformed request (empty prompt,
  // token outside the vocabulary, max_new_tokens < 1, negative arrival step).
  Simulator(SimConfig config, SimModel model, std::vector<SimRequest> requests);
  ~Simulator();

  // Runs one step. Returns false (and does nothing) once every request finished or was rejected.
  bool step();
  // Steps until done() or `max_steps` steps have run in total; returns the steps run now.
  int run(int max_steps);
  bool done() const;
  int current_step() const { return step_; }  // steps completed so far

  // The recording; shared so a UI can keep reading it on another thread (and after the simulator
  // is gone).
  std::shared_ptr<const Timeline> timeline() const { return timeline_; }
  const SimConfig& config() const { return config_; }
  const KvCacheManager& cache() const { return *cache_; }
  const HostKvTier& host_tier() const { return *host_; }
  // The prefix cache, or null when prefix caching is off.
  const PrefixCache* prefix_cache() const { return prefix_.get(); }
  // The KV tiers behind the prefix cache (their reloads, I/O and store), or null when there are
  // none.
  const KvTiers* tiers() const { return tiers_.get(); }
  // Prompt tokens reloaded from the tiers instead of computed (0 without tiers).
  std::int64_t tier_hit_tokens() const { return tiers_ ? tiers_->hit_tokens() : 0; }
  // The forward time of steps that ran prefill tokens only, and those tokens: what recomputing a
  // prompt token costs on this machine, measured in this run (0 tokens when no such step ran).
  double prefill_only_seconds() const { return prefill_only_seconds_; }
  std::int64_t prefill_only_tokens() const { return prefill_only_tokens_; }
  // Called with every logits vector a request samples from: (request, generated index, logits).
  using LogitsObserver = std::function<void(std::int32_t, int, std::span<const float>)>;
  void set_logits_observer(LogitsObserver observer) { logits_observer_ = std::move(observer); }
  // Prompt tokens actually run through the model (prefill and recompute), over the whole run.
  std::int64_t prefill_tokens_computed() const { return prefill_total_; }
  int num_requests() const { return static_cast<int>(requests_.size()); }
  const RequestRun& request(int id) const { return requests_.at(static_cast<std::size_t>(id)); }

  // Token eviction: the request's evictor while it runs (null when eviction is off or the request
  // holds no cache).
  const TokenEvictor* token_evictor(int id) const;
  bool evicts_tokens() const { return config_.token_eviction.policy.kind != EvictionKind::kNone; }

  // Throws kvscope::Error on the first inconsistency between the scheduler, the cache manager and
  // the host tier (plus the cache manager's own invariants).
  void check_invariants() const;

 private:
  struct Work {  // what one step does
    struct Entry {
      std::int32_t id;
      int tokens;
      int reserved_blocks = 0;  // token eviction: blocks held back for execute's appends
    };
    std::vector<Entry> plan;
    int budget = 0;
    int reserved_blocks = 0;  // sum over the plan: not allocatable by later requests this step
    bool preempted = false;
    std::int64_t prefill_tokens = 0;
    std::int64_t decode_tokens = 0;
  };
  // simulator.cpp
  void arrive();
  void execute(Work& w);
  void finish(RequestRun& r);
  // What a request samples its next token from: its last token's logits, or, when sampling is
  // greedy and nobody observes logits, the token itself, taken by the backend
  // (Transformer::greedy_step: on a CUDA backend the argmax runs on the device).
  struct NextToken {
    std::span<const float> logits;
    int greedy = -1;
  };
  void sample(RequestRun& r, NextToken from);
  void close_step(const Work& w);
  // simulator_prefix.cpp
  void make_prefix_cache();
  bool prefix_admission_fits(const RequestRun& r, int budget) const;
  // Reloads what it can of the tiers' run after `hit_blocks` into fresh blocks appended to the
  // sequence; tokens reloaded.
  int reload_from_tiers(RequestRun& r, int hit_blocks);
  void start_sequence(RequestRun& r);
  void cache_full_blocks(RequestRun& r);
  void fork_samples(RequestRun& lead, NextToken from);
  // simulator_evict.cpp
  void check_token_eviction();
  void start_evictor(RequestRun& r);
  [[nodiscard]] bool reserve_for_evicting(Work& w, RequestRun& r, int n);
  std::span<float> forward_evicting(RequestRun& r, int first, int n);
  // Runs every token of the plan as one Transformer::forward_step (greedy_step when sampling is
  // greedy and no logits observer is set); per entry what its last token samples from when that
  // token ends the request's known tokens (nothing otherwise: a prefill chunk that does not
  // finish its prompt samples nothing), valid until the next forward.
  std::vector<NextToken> forward_plan(const Work& w);
  void record_evicted(const RequestRun& r, const std::vector<std::int32_t>& live_before);
  void sync_table_event(const RequestRun& r);
  int blocks_bound_evicting(int kv_tokens) const;
  void check_evictor_invariants(const RequestRun& r) const;
  // Blocks this step's later requests may still take.
  int allocatable(const Work& w) const { return cache_->num_allocatable() - w.reserved_blocks; }
  template <class Payload>
  void emit(const Payload& p) {
    timeline_->emit(to_event(p, step_));
  }
  // simulator_schedule.cpp
  void schedule(Work& w);
  void grow_running(Work& w);
  void swap_in(Work& w);
  void admit(Work& w);
  [[nodiscard]] bool plan_tokens(Work& w, RequestRun& r);
  std::int32_t pick_victim() const;
  void preempt(std::int32_t id, Work& w);
  int pending(const RequestRun& r) const {
    return static_cast<int>(r.tokens.size()) - r.num_computed;
  }
  std::optional<RejectReason> check_fits(RequestRun& r, int* blocks_needed) const;

  SimConfig config_;
  SimModel model_;
  int context_ = 0;                          // the model's context length (tokens)
  int reservation_ = 0;                      // contiguous: tokens reserved per request
  std::vector<RequestRun> requests_;         // by id
  std::vector<std::int32_t> arrival_order_;  // ids by (arrival_step, id)
  std::size_t next_arrival_ = 0;
  std::deque<std::int32_t> waiting_;   // FCFS; recompute-preempted requests go to the front
  std::vector<std::int32_t> running_;  // in admission order
  std::vector<std::int32_t> swapped_;  // in swap-out order
  int num_finished_ = 0;
  int num_rejected_ = 0;
  std::int64_t admit_counter_ = 0;
  std::int64_t preemptions_ = 0;
  std::int64_t tokens_recomputed_ = 0;
  std::int64_t prompt_tokens_ = 0;
  std::int64_t prefix_hit_tokens_ = 0;
  std::int64_t prefill_total_ = 0;
  double prefill_only_seconds_ = 0.0;
  std::int64_t prefill_only_tokens_ = 0;
  int step_ = 0;
  std::unique_ptr<KvCacheManager> cache_;
  std::unique_ptr<PrefixCache> prefix_;  // after cache_: destroyed first
  std::unique_ptr<KvTiers> tiers_;       // after prefix_: its evictions write back into the tiers
  std::unique_ptr<HostKvTier> host_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Transformer> transformer_;
  std::shared_ptr<Timeline> timeline_;
  // [request id] token eviction: the running request's evictor (+ attention recorder), else null.
  // Declared after cache_ so they go first (each evictor refers to the cache).
  std::vector<std::unique_ptr<EvictingCacheHook>> evictors_;
  LogitsObserver logits_observer_;
};

}  // namespace kvscope

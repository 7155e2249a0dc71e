// Simulator: continuous batching over a real KV cache and the real model. It wires three parts
// to one Timeline: the Scheduler (sched/scheduler.h: queues, the step plan, admission on a cached
// prefix, victims and preemption by recompute or swap; bookkeeping only), the StepExecutor
// (sched/step_executor.h: the plan's tokens in one batched forward, sampling, token evictors),
// and the cache with the prefix cache, the KV tiers (engine/tiers/) and the swap space they share.
// Each step(): arrivals, the plan, the forward, the bookkeeping of what was computed and sampled
// (forking parallel samples after their prompt), then the step's metrics.
//
// THREADING: step() and run() are the Timeline's writer; call them from one thread. Other threads
// may read timeline() at any time (see Timeline). Everything else here is for the stepping thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/prefix/prefix_cache.h"
#include "engine/sched/scheduler.h"
#include "engine/sched/sim_config.h"
#include "engine/sched/step_executor.h"
#include "engine/tiers/host_tier.h"
#include "engine/tiers/kv_tiers.h"
#include "engine/trace/timeline.h"

namespace kvscope {

class Simulator {
 public:
  // Throws kvscope::Error on an impossible configuration or malformed request (empty prompt,
  // token outside the vocabulary, max_new_tokens < 1, negative arrival step).
  Simulator(SimConfig config, SimModel model, std::vector<SimRequest> requests);
  ~Simulator();
  Simulator(const Simulator&) = delete;  // its parts refer to its config and to each other
  Simulator& operator=(const Simulator&) = delete;

  // Runs one step. Returns false (and does nothing) once every request finished or was rejected.
  bool step();
  // Steps until done() or `max_steps` steps have run in total; returns the steps run now.
  int run(int max_steps);
  bool done() const { return scheduler_->done(); }
  // Something to run now (a request waiting, running or swapped out): step() would plan tokens.
  bool has_work() const { return scheduler_->has_work(); }
  // Disaggregated serving (engine/sched/disagg.h): queues request `id`, which waits for this
  // (SimRequest::external_arrival), at the next step; frees the blocks a finished request holds
  // (SimRequest::hold_blocks); and where K/V that comes from elsewhere is read from
  // (SimRequest::kv_in_tokens). deliver and release throw InternalError on any other request.
  void deliver(std::int32_t id) { scheduler_->deliver(id); }
  // A decode instance's prefix cache: maps request `id`'s cached prefix before it is delivered
  // (Scheduler::reserve_prefix); returns the blocks mapped.
  int reserve_prefix(std::int32_t id) { return scheduler_->reserve_prefix(id); }
  void release(std::int32_t id);
  void set_kv_source(StepExecutor::KvSource source) { executor_->set_kv_source(std::move(source)); }
  // The last step's plan: which requests ran how many tokens (empty before the first step).
  const StepPlan& last_plan() const { return last_plan_; }
  int current_step() const { return step_; }  // steps completed so far

  // The recording; shared so a UI can keep reading it on another thread (and after the simulator
  // is gone).
  std::shared_ptr<const Timeline> timeline() const { return timeline_; }
  const SimConfig& config() const { return config_; }
  const KvCacheManager& cache() const { return *cache_; }
  // The hybrid layer-group plan (config.layer_groups; engine/kv/layer_groups.h), when there is one.
  const std::optional<LayerGroupPlan>& layer_groups() const { return layer_groups_; }
  const HostKvTier& host_tier() const { return *host_; }
  const Scheduler& scheduler() const { return *scheduler_; }
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
  using LogitsObserver = StepExecutor::LogitsObserver;
  void set_logits_observer(LogitsObserver observer) {
    executor_->set_logits_observer(std::move(observer));
  }
  // Prompt tokens actually run through the model (prefill and recompute), over the whole run.
  std::int64_t prefill_tokens_computed() const { return scheduler_->prefill_tokens_computed(); }
  int num_requests() const { return scheduler_->num_requests(); }
  const RequestRun& request(int id) const { return scheduler_->request(id); }

  // Token eviction: the request's evictor while it runs (null when eviction is off or the request
  // holds no cache).
  const TokenEvictor* token_evictor(int id) const { return executor_->token_evictor(id); }
  // CacheBlend: the chunk positions request `id`'s last admission recomputed, ascending.
  const std::vector<int>& blend_recomputed(int id) const { return executor_->blend_recomputed(id); }
  bool evicts_tokens() const { return config_.evicts_tokens(); }

  // Throws kvscope::Error on the first inconsistency between the scheduler, the cache manager,
  // the host tier and the token evictors (plus the cache manager's own invariants).
  void check_invariants() const;

 private:
  void make_prefix_cache();
  // Runs the plan through the executor and records, entry by entry, what was computed and
  // sampled.
  void execute(StepPlan& plan);
  void sample(RequestRun& r, StepExecutor::NextToken from);
  void close_step(const StepPlan& plan);

  SimConfig config_;
  SimModel model_;
  std::optional<LayerGroupPlan> layer_groups_;
  std::unique_ptr<KvCacheManager> cache_;
  std::unique_ptr<PrefixCache> prefix_;  // after cache_: destroyed first
  std::unique_ptr<KvTiers> tiers_;       // after prefix_: its evictions write back into the tiers
  std::unique_ptr<HostKvTier> host_;     // the swap space
  std::shared_ptr<Timeline> timeline_;
  // After cache_: destroyed first (each token evictor refers to the cache).
  std::unique_ptr<StepExecutor> executor_;
  std::unique_ptr<Scheduler> scheduler_;
  int step_ = 0;
  StepPlan last_plan_;
  double prefill_only_seconds_ = 0.0;
  std::int64_t prefill_only_tokens_ = 0;
};

}  // namespace kvscope

// StepExecutor: runs a step's plan through the real model. All the plan's tokens go through one
// batched Transformer::forward_step over the cache's sequence views (greedy_step when sampling is
// greedy and nobody observes logits, so a CUDA backend takes the argmax on the device); under
// token eviction each sequence runs token by token through its own evictor instead, which trims
// the cache to the budget after every token (the executor keeps those evictors, started and
// dropped as the Scheduler tells it). Sampling is seeded per (request, token index), so a request
// samples the same tokens alone or in any batch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/host_step.h"
#include "engine/infer/transformer.h"
#include "engine/sched/scheduler.h"

namespace kvscope {

class EvictingCacheHook;

class StepExecutor final : public SequenceListener {
 public:
  // What a request samples its next token from: its last token's logits, or, when sampling is
  // greedy and nobody observes logits, the token itself, taken by the backend.
  struct NextToken {
    std::span<const float> logits;
    int greedy = -1;
  };
  // Called with every logits vector a request samples from: (request, generated index, logits).
  using LogitsObserver = std::function<void(std::int32_t, int, std::span<const float>)>;

  // Makes the backend (config.make_backend, else the CPU backend) and the transformer. `cache`,
  // `events` and `step` outlive it.
  StepExecutor(const SimConfig& config, const SimModel& model, KvCacheManager& cache,
               EventSink* events, const int* step, int num_requests);
  ~StepExecutor() override;

  // Throws kvscope::Error when the configured token eviction cannot run here (no weights, swap
  // preemption, or the evictor's own checks on a probe sequence). `prefix`: the cache's block
  // source, or null.
  void check_token_eviction(PrefixCache* prefix) const;

  void set_logits_observer(LogitsObserver observer) { logits_observer_ = std::move(observer); }

  // Runs every token of the plan as one batched forward; per entry what its last token samples
  // from when that token ends the request's known tokens (nothing otherwise), valid until the
  // next forward. Not for token eviction (see forward_evicting).
  std::vector<NextToken> forward(const StepPlan& plan, const std::vector<RequestRun>& requests);
  // Token eviction: appends and runs `r`'s tokens [first, first + n) one at a time through its
  // evictor, recording the positions each trim evicts. The slots were reserved at scheduling.
  NextToken forward_evicting(const RequestRun& r, int first, int n);
  // The token `r` samples from `from` (0 in a run without weights).
  int choose(const RequestRun& r, NextToken from);
  // Whether `token` ends a request (a stop token of a run with weights).
  bool is_stop(int token) const;
  // Token eviction: states the request's table when it holds fewer slots than tokens computed
  // (PrefillChunk and DecodeToken tell a replay only the token count).
  void sync_table_event(const RequestRun& r);

  // SequenceListener: a token evictor per running request, when eviction is on.
  void on_sequence_started(const RequestRun& r) override;
  void on_sequence_dropped(std::int32_t id) override;
  // CacheBlend (SimConfig::blend): fills the request's chunk slots [0, tokens): each chunk
  // prefilled alone, its keys re-rotated into place, then the recompute pass.
  void on_blend(const RequestRun& r, int tokens) override;
  // Where K/V that comes from elsewhere (SimRequest::kv_in_tokens) is read from: called with the
  // request, its slots [from, to) (from: the whole blocks its cached prefix mapped, 0 without)
  // and the blocks that hold them (table entries from / block_size on), to write into `storage`
  // (KvStorage::write_block).
  using KvSource = std::function<void(const RequestRun& r, int from, int to, KvStorage& storage,
                                      std::span<const BlockId> blocks)>;
  void set_kv_source(KvSource source) { kv_source_ = std::move(source); }
  // Fills the request's slots [from, to) from the KV source (nothing in a run without weights:
  // there are no bytes). InternalError when a run with weights has no source.
  void on_kv_in(const RequestRun& r, int from, int to) override;
  // The context positions the request's last blend recomputed, ascending (empty before one).
  const std::vector<int>& blend_recomputed(int id) const;

  bool computes() const { return transformer_ != nullptr; }
  // The request's evictor while it runs (null when eviction is off or it holds no cache).
  const TokenEvictor* token_evictor(int id) const;
  // Throws InternalError when an evictor disagrees with its request or the cache.
  void check_invariants(const RequestRun& r) const;

 private:
  void record_evicted(const RequestRun& r, const std::vector<std::int32_t>& live_before);
  template <class Payload>
  void emit(const Payload& p) {
    if (events_ != nullptr) events_->emit(to_event(p, *step_));
  }

  const SimConfig& config_;
  const SimModel& model_;
  KvCacheManager& cache_;
  EventSink* events_;
  const int* step_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Transformer> transformer_;
  // Sparse attention: one selector for every sequence's views (it keeps no per-query state).
  std::unique_ptr<SparseSelector> selector_;
  // [request id] the running request's evictor (+ attention recorder), else null.
  std::vector<std::unique_ptr<EvictingCacheHook>> evictors_;
  LogitsObserver logits_observer_;
  // CacheBlend: host activations for its recompute pass, and each request's picks.
  std::unique_ptr<HostStep> blend_step_;
  std::vector<std::vector<int>> blend_picks_;
  KvSource kv_source_;
};

}  // namespace kvscope

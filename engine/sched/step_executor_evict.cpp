// StepExecutor token eviction: one TokenEvictor (inside an EvictingCacheHook, with its attention
// recorder) per running sequence. Evicting requests run their tokens one at a time, exactly as
// `kvscope generate --evict` does: append a slot, forward through the evictor's view, trim to the
// budget. So the scheduler reserves blocks for a planned chunk instead of appending them, and the
// appends happen here (never more than reserved: eviction only gives blocks back).
//
// Preemption by recompute drops the evictor with the blocks; on readmission the request's tokens
// are replayed from scratch through a fresh evictor with the same policy, which reproduces the
// same evictions (the policies are deterministic functions of the tokens and the call count).
// Swap is refused: the host tier copies blocks, not the evictor's per-slot state.
#include <algorithm>
#include <string>

#include "engine/common/error.h"
#include "engine/evict/eviction_hook.h"
#include "engine/sched/step_executor.h"

namespace kvscope {

void StepExecutor::check_token_eviction(PrefixCache* prefix) const {
  if (!config_.evicts_tokens()) return;
  const std::string where = "cache.token_eviction";
  if (!model_.weights) {
    throw Error(where,
                "needs the model's weights (a bookkeeping-only run computes no attention and no "
                "K/V); expected a model with weights");
  }
  if (config_.preemption == PreemptionMode::kSwap) {
    throw Error(where,
                "is not supported with preemption swap (the host tier copies blocks, not the "
                "evictor's per-slot state); expected preemption recompute");
  }
  // The evictor's own checks (budget, sinks, allocator, prefix caching, KV format), on a probe
  // sequence in a throwaway cache of the same kind (no storage, no events).
  KvCacheManager probe(cache_.layout(), config_.allocator,
                       config_.reservation(model_.config.seq_len), false);
  if (prefix != nullptr) probe.set_block_source(prefix);
  if (!probe.add_sequence(SeqId(0))) {
    throw Error(where, "internal: the probe sequence found no room");
  }
  TokenEvictor check(probe, SeqId(0), config_.token_eviction, model_.config.rope_theta, *backend_);
  (void)check;
}

const TokenEvictor* StepExecutor::token_evictor(int id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= evictors_.size()) return nullptr;
  const auto& hook = evictors_[static_cast<std::size_t>(id)];
  return hook ? &hook->evictor() : nullptr;
}

void StepExecutor::on_sequence_started(const RequestRun& r) {
  if (!config_.evicts_tokens()) return;
  const int max_tokens = static_cast<int>(r.spec.prompt_tokens.size()) + r.spec.max_new_tokens;
  auto hook =
      std::make_unique<EvictingCacheHook>(config_.token_eviction, model_.config, max_tokens);
  hook->begin(cache_, SeqId(r.id), *backend_);
  evictors_[static_cast<std::size_t>(r.id)] = std::move(hook);
}

void StepExecutor::on_sequence_dropped(std::int32_t id) {
  if (config_.evicts_tokens()) evictors_[static_cast<std::size_t>(id)].reset();
}

StepExecutor::NextToken StepExecutor::forward_evicting(const RequestRun& r, int first, int n) {
  EvictingCacheHook& hook = *evictors_[static_cast<std::size_t>(r.id)];
  const TokenEvictor& evictor = hook.evictor();
  const SeqId seq(r.id);
  const int keep = config_.token_eviction.policy.budget - 1;  // after_token's live target
  NextToken next;
  std::vector<std::int32_t> live_before;  // token indices live before a trim
  for (int pos = first; pos < first + n; ++pos) {
    if (!cache_.append_slots(seq, 1)) {
      throw Error("simulator", "internal: request " + std::to_string(r.id) +
                                   " found no block for token " + std::to_string(pos) +
                                   " (reserved at scheduling)");
    }
    const KvSeqView view = hook.view();  // first: registers the new slot
    const int rope_pos = hook.position();
    next.logits = transformer_->forward(r.tokens[static_cast<std::size_t>(pos)], rope_pos, view,
                                        hook.observer());
    live_before.clear();
    if (evictor.num_live() > keep) {
      for (std::size_t s = 0; s < evictor.slot_live().size(); ++s)
        if (evictor.slot_live()[s] != 0) live_before.push_back(evictor.slot_tokens()[s]);
    }
    const long evicted = evictor.counters().tokens_evicted;
    hook.after_token();  // the logits stay as they are: eviction touches only the cache
    if (evictor.counters().tokens_evicted != evicted) record_evicted(r, live_before);
  }
  return next;
}

void StepExecutor::record_evicted(const RequestRun& r,
                                  const std::vector<std::int32_t>& live_before) {
  const TokenEvictor& evictor = *token_evictor(r.id);
  std::vector<std::int32_t> live_after;
  for (std::size_t s = 0; s < evictor.slot_live().size(); ++s)
    if (evictor.slot_live()[s] != 0) live_after.push_back(evictor.slot_tokens()[s]);
  std::sort(live_after.begin(), live_after.end());
  for (std::int32_t token : live_before) {
    if (std::binary_search(live_after.begin(), live_after.end(), token)) continue;
    emit(ev::EvictedPosition{r.id, token});
  }
}

void StepExecutor::sync_table_event(const RequestRun& r) {
  if (!config_.evicts_tokens()) return;
  const SeqId seq(r.id);
  if (!cache_.has_sequence(seq)) return;
  const BlockTable& t = cache_.table(seq);
  if (t.num_tokens == r.num_computed) return;
  emit(ev::BlockTableUpdated{r.id, static_cast<std::int64_t>(t.blocks.size()), t.num_tokens});
}

void StepExecutor::check_invariants(const RequestRun& r) const {
  const std::string who = "request " + std::to_string(r.id);
  const TokenEvictor* evictor = token_evictor(r.id);
  if (!evictors_.empty() && (r.phase == RequestPhase::kRunning) != (evictor != nullptr)) {
    throw InternalError("simulator invariant", who + (evictor ? " has an evictor but is not running"
                                                              : " runs without evictor"));
  }
  if (evictor == nullptr) return;
  const int slots = cache_.table(SeqId(r.id)).num_tokens;
  if (static_cast<int>(evictor->slot_live().size()) != slots) {
    throw InternalError("simulator invariant",
                        who + " evictor tracks " + std::to_string(evictor->slot_live().size()) +
                            " slots, the cache holds " + std::to_string(slots));
  }
  if (evictor->next_token() != r.num_computed) {
    throw InternalError("simulator invariant",
                        who + " evictor has seen " + std::to_string(evictor->next_token()) +
                            " tokens, scheduler says " + std::to_string(r.num_computed));
  }
  const int budget = config_.token_eviction.policy.budget;
  if (r.num_computed > 0 && evictor->num_live() > budget - 1) {
    throw InternalError("simulator invariant", who + " keeps " +
                                                   std::to_string(evictor->num_live()) +
                                                   " live tokens between steps, budget - 1 is " +
                                                   std::to_string(budget - 1));
  }
}

}  // namespace kvscope

// Simulator scheduling: grow running requests (preempting victims when the pool is full), swap
// requests back in, then admit waiting requests FCFS, all within the per-step token budget.
// As in vLLM, a step that had to preempt admits nothing new (no thrash).
#include <algorithm>
#include <array>
#include <string>

#include "engine/common/error.h"
#include "engine/evict/eviction_hook.h"
#include "engine/sched/simulator.h"

namespace kvscope {

void Simulator::schedule(Work& w) {
  grow_running(w);
  if (w.preempted) return;
  swap_in(w);
  if (!swapped_.empty()) return;  // swapped requests come back before new ones are admitted
  admit(w);
}

// Appends slots for r's next chunk and plans it. False when the pool has no room.
bool Simulator::plan_tokens(Work& w, RequestRun& r) {
  const int n = std::min(pending(r), w.budget);
  if (n <= 0) return true;  // nothing to do (or budget spent): keeps its blocks, waits a step
  if (evicts_tokens()) return reserve_for_evicting(w, r, n);
  if (!cache_->append_slots(SeqId(r.id), n)) return false;
  w.plan.push_back({r.id, n});
  w.budget -= n;
  return true;
}

void Simulator::grow_running(Work& w) {
  const std::vector<std::int32_t> order = running_;  // admission order
  for (std::int32_t id : order) {
    RequestRun& r = requests_[static_cast<std::size_t>(id)];
    if (r.phase != RequestPhase::kRunning) continue;  // preempted earlier in this step
    const int n = std::min(pending(r), w.budget);
    if (n <= 0) continue;
    bool victim_is_self = false;
    while (cache_->blocks_needed(SeqId(id), n) > allocatable(w)) {
      const std::int32_t victim = pick_victim();
      preempt(victim, w);
      if (victim == id) {
        victim_is_self = true;
        break;
      }
    }
    if (victim_is_self) continue;
    if (!plan_tokens(w, r)) {
      throw Error("simulator",
                  "internal: request " + std::to_string(id) + " could not grow after preemption");
    }
  }
}

void Simulator::swap_in(Work& w) {
  while (!swapped_.empty()) {
    RequestRun& r = requests_[static_cast<std::size_t>(swapped_.front())];
    const SeqId seq(r.id);
    const int blocks = cache_->blocks_for(r.num_computed);
    if (config_.max_running > 0 && static_cast<int>(running_.size()) >= config_.max_running) return;
    if (config_.allocator == AllocatorKind::kPaged && blocks > cache_->num_allocatable()) return;
    if (!cache_->add_sequence(seq)) return;  // contiguous: no free run for the reservation
    if (!cache_->append_slots(seq, r.num_computed)) {
      throw Error("simulator",
                  "internal: swap-in of request " + std::to_string(r.id) + " found no room");
    }
    const BlockTable& t = cache_->table(seq);
    host_->swap_in(r.host_slots, cache_->storage(),
                   std::span<const BlockId>(t.blocks).subspan(0, static_cast<std::size_t>(blocks)));
    r.host_slots.clear();
    cache_full_blocks(r);  // re-offer the fresh copies (deduplicated against cached ones)
    swapped_.erase(swapped_.begin());
    r.phase = RequestPhase::kRunning;
    r.admit_order = ++admit_counter_;
    running_.push_back(r.id);
    emit(ev::SwappedIn{r.id, blocks});
    if (cache_->blocks_needed(seq, std::min(pending(r), w.budget)) <= cache_->num_allocatable()) {
      // Room was checked just above; should planning still come up short, the request stays
      // running and is planned again next step, so the result needs no handling here.
      static_cast<void>(plan_tokens(w, r));
    }
  }
}

void Simulator::admit(Work& w) {
  while (!waiting_.empty()) {
    RequestRun& r = requests_[static_cast<std::size_t>(waiting_.front())];
    const SeqId seq(r.id);
    const int n = std::min(pending(r), w.budget);
    if (n <= 0) return;  // token budget spent
    if (config_.max_running > 0 && static_cast<int>(running_.size()) >= config_.max_running) return;
    if (prefix_) {
      if (!prefix_admission_fits(r, w.budget)) return;
      start_sequence(r);  // maps the cached prefix: its prefill is skipped
    } else {
      if (config_.allocator == AllocatorKind::kPaged &&
          cache_->blocks_for(n) > cache_->pool().num_free() - w.reserved_blocks)
        return;
      if (!cache_->add_sequence(seq)) return;  // contiguous: no free run (external fragmentation)
      start_evictor(r);
    }
    waiting_.pop_front();
    r.phase = RequestPhase::kRunning;
    r.admit_order = ++admit_counter_;
    if (!r.admitted_step) {
      r.admitted_step = step_;
      prompt_tokens_ += static_cast<std::int64_t>(r.spec.prompt_tokens.size());
    }
    running_.push_back(r.id);
    if (!plan_tokens(w, r)) {
      throw Error("simulator",
                  "internal: admitted request " + std::to_string(r.id) + " found no room");
    }
    emit(ev::Admitted{r.id, static_cast<std::int64_t>(cache_->table(seq).blocks.size())});
  }
}

std::int32_t Simulator::pick_victim() const {
  // running_ is in admission order, so scanning it backwards prefers the last admitted on ties.
  std::int32_t best = running_.back();
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    const RequestRun& r = requests_[static_cast<std::size_t>(*it)];
    const RequestRun& b = requests_[static_cast<std::size_t>(best)];
    switch (config_.victim) {
      case VictimPolicy::kLastAdmitted:
        return running_.back();
      case VictimPolicy::kLongest:
        if (cache_->table(SeqId(r.id)).num_tokens > cache_->table(SeqId(b.id)).num_tokens)
          best = r.id;
        break;
      case VictimPolicy::kLowestPriority:
        if (r.spec.priority < b.spec.priority) best = r.id;
        break;
    }
  }
  return best;
}

void Simulator::preempt(std::int32_t id, Work& w) {
  RequestRun& r = requests_[static_cast<std::size_t>(id)];
  const SeqId seq(id);
  auto planned =
      std::find_if(w.plan.begin(), w.plan.end(), [&](const Work::Entry& e) { return e.id == id; });
  if (planned != w.plan.end()) {
    w.budget += planned->tokens;
    w.reserved_blocks -= planned->reserved_blocks;
    w.plan.erase(planned);
  }
  running_.erase(std::find(running_.begin(), running_.end(), id));
  r.cached_blocks = 0;
  ++preemptions_;
  ++r.preemptions;
  w.preempted = true;
  const int blocks = cache_->blocks_for(r.num_computed);  // blocks holding computed K/V
  if (config_.preemption == PreemptionMode::kSwap && r.num_computed > 0 &&
      blocks <= host_->num_free()) {
    const BlockTable& t = cache_->table(seq);
    // Slots appended for this step's (now cancelled) chunk hold nothing: only computed tokens move.
    if (t.num_tokens != r.num_computed) {
      emit(ev::BlockTableUpdated{id, blocks, r.num_computed});
    }
    emit(ev::Preempted{id, PreemptReason::kSwap, 0});
    r.host_slots = host_->swap_out(cache_->storage(), std::span<const BlockId>(t.blocks).subspan(
                                                          0, static_cast<std::size_t>(blocks)));
    cache_->free_sequence(seq);
    r.phase = RequestPhase::kSwapped;
    swapped_.push_back(id);
    emit(ev::SwappedOut{id, blocks});
    return;
  }
  // Recompute (or swap with a full host tier): drop the K/V, recompute prompt + generated later
  // (with token eviction: from scratch through a fresh evictor, reproducing the same evictions).
  if (evicts_tokens()) evictors_[static_cast<std::size_t>(id)].reset();
  emit(ev::Preempted{id, PreemptReason::kRecompute, r.num_computed});
  cache_->free_sequence(seq);
  r.num_computed = 0;
  r.phase = RequestPhase::kWaiting;
  waiting_.push_front(id);
}

void Simulator::check_invariants() const {
  cache_->check_invariants();
  if (prefix_) prefix_->check_invariants();
  if (tiers_) tiers_->check_invariants();
  int host_used = 0;
  std::array<std::size_t, kNumRequestPhases> counted{};
  for (const RequestRun& r : requests_) {
    const std::string who = "request " + std::to_string(r.id);
    const bool has_seq = cache_->has_sequence(SeqId(r.id));
    if (!r.arrived) {
      if (has_seq || r.generated != 0)
        throw InternalError("simulator invariant", who + " acted before arriving");
      continue;
    }
    ++counted[static_cast<int>(r.phase)];
    if (r.tokens.size() != r.spec.prompt_tokens.size() + static_cast<std::size_t>(r.generated) ||
        r.generated > r.spec.max_new_tokens) {
      throw InternalError("simulator invariant", who + " token count does not add up");
    }
    if ((r.phase == RequestPhase::kRunning) != has_seq) {
      throw InternalError("simulator invariant", who + (has_seq ? " holds blocks but is not running"
                                                                : " runs without blocks"));
    }
    check_evictor_invariants(r);
    if (has_seq && !evicts_tokens() && cache_->table(SeqId(r.id)).num_tokens != r.num_computed) {
      throw InternalError("simulator invariant",
                          who + " cache holds " +
                              std::to_string(cache_->table(SeqId(r.id)).num_tokens) +
                              " tokens, scheduler says " + std::to_string(r.num_computed));
    }
    const int want_slots =
        r.phase == RequestPhase::kSwapped ? cache_->blocks_for(r.num_computed) : 0;
    if (static_cast<int>(r.host_slots.size()) != want_slots) {
      throw InternalError("simulator invariant",
                          who + " holds " + std::to_string(r.host_slots.size()) +
                              " host slots, expected " + std::to_string(want_slots));
    }
    if (r.phase == RequestPhase::kWaiting && r.num_computed != 0) {
      throw InternalError("simulator invariant", who + " waits with computed tokens");
    }
    host_used += static_cast<int>(r.host_slots.size());
  }
  if (host_used != host_->num_used())
    throw InternalError("simulator invariant", "host tier slot count does not add up");
  if (counted[static_cast<int>(RequestPhase::kWaiting)] != waiting_.size() ||
      counted[static_cast<int>(RequestPhase::kRunning)] != running_.size() ||
      counted[static_cast<int>(RequestPhase::kSwapped)] != swapped_.size() ||
      counted[static_cast<int>(RequestPhase::kFinished)] !=
          static_cast<std::size_t>(num_finished_) ||
      counted[static_cast<int>(RequestPhase::kRejected)] !=
          static_cast<std::size_t>(num_rejected_)) {
    throw InternalError("simulator invariant", "request queues do not match request phases");
  }
  if (cache_->sequences().size() != running_.size())
    throw InternalError("simulator invariant", "cache sequences != running requests");
}

}  // namespace kvscope

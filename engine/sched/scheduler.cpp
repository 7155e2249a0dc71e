// Scheduler: arrivals, the step plan (grow running requests, preempting victims when the pool is
// full; swap requests back in; admit waiting requests FCFS, all within the per-step token budget),
// the bookkeeping after each forward, retirement and the queues' invariants. As in vLLM, a step
// that had to preempt admits nothing new (no thrash).
#include "engine/sched/scheduler.h"

#include <algorithm>
#include <array>
#include <limits>
#include <string>

#include "engine/common/error.h"

namespace kvscope {

Scheduler::Scheduler(const SimConfig& config, int context, Parts parts,
                     std::vector<SimRequest> requests)
    : config_(config),
      context_(context),
      reservation_(config.reservation(context)),
      cache_(*parts.cache),
      prefix_(parts.prefix),
      tiers_(parts.tiers),
      swap_(*parts.swap),
      events_(parts.events),
      step_(parts.step) {
  // Parallel samples become consecutive ids; with prefix caching all but the first fork off it.
  for (SimRequest& spec : requests) {
    const auto lead = static_cast<std::int32_t>(requests_.size());
    for (int k = 0; k < spec.n_samples; ++k) {
      RequestRun r;
      r.id = static_cast<std::int32_t>(requests_.size());
      r.spec = spec;
      r.tokens = r.spec.prompt_tokens;
      if (k > 0 && prefix_ != nullptr) {
        r.fork_of = lead;
        requests_[static_cast<std::size_t>(lead)].fork_children.push_back(r.id);
      } else if (r.spec.external_arrival) {
        ++num_undelivered_;
      } else {
        arrival_order_.push_back(r.id);
      }
      requests_.push_back(std::move(r));
    }
  }
  std::stable_sort(arrival_order_.begin(), arrival_order_.end(),
                   [&](std::int32_t a, std::int32_t b) {
                     return requests_[static_cast<std::size_t>(a)].spec.arrival_step <
                            requests_[static_cast<std::size_t>(b)].spec.arrival_step;
                   });
}

bool Scheduler::done() const {
  return next_arrival_ == arrival_order_.size() && num_undelivered_ == 0 && !has_work();
}

std::optional<RejectReason> Scheduler::check_fits(RequestRun& r, int* blocks_needed) const {
  const int prompt = static_cast<int>(r.spec.prompt_tokens.size());
  const int kv_tokens = prompt + r.spec.max_new_tokens - 1;  // the last sampled token is never fed
  const bool contiguous = config_.allocator == AllocatorKind::kContiguous;
  *blocks_needed = contiguous                ? cache_.blocks_for(reservation_)
                   : config_.evicts_tokens() ? blocks_bound_evicting(kv_tokens)
                                             : cache_.blocks_to_hold(kv_tokens);
  // With token eviction a sequence may run past the model's trained context (the cache holds at
  // most the budget; positions beyond seq_len are out of distribution, see eviction.md).
  constexpr int kEvictingTokenCap = 1'000'000;
  const int limit = contiguous                ? reservation_
                    : config_.evicts_tokens() ? kEvictingTokenCap
                                              : context_;
  if (kv_tokens > limit) {
    r.reject_reason = "prompt " + std::to_string(prompt) + " + max_new_tokens " +
                      std::to_string(r.spec.max_new_tokens) + " needs " +
                      std::to_string(kv_tokens) + " KV slots, more than the " +
                      (contiguous                ? "per-request reservation of "
                       : config_.evicts_tokens() ? "evicting-sequence cap of "
                                                 : "model context of ") +
                      std::to_string(limit) + " tokens";
    return RejectReason::kLargerThanContext;
  }
  if (*blocks_needed > config_.num_blocks) {
    r.reject_reason =
        "needs " + std::to_string(*blocks_needed) + " blocks (" + std::to_string(kv_tokens) +
        " tokens at block size " + std::to_string(config_.block_size) +
        (config_.evicts_tokens() ? ", with token eviction at budget " +
                                       std::to_string(config_.token_eviction.policy.budget)
                                 : std::string()) +
        ") but the whole pool has " + std::to_string(config_.num_blocks);
    return RejectReason::kLargerThanPool;
  }
  return std::nullopt;
}

int Scheduler::blocks_bound_evicting(int kv_tokens) const {
  // Every block holds a live token (fully evicted blocks go back at once) and at most `budget`
  // tokens are live, so a sequence never holds more than `budget` blocks; with compaction always
  // the live tokens are packed, so blocks_for(budget).
  // The sliding windows evict the oldest tokens, so their live tokens are one run (window) or
  // the sinks plus one run (sinks + window), each touching at most one partial block more.
  const EvictorOptions& o = config_.token_eviction;
  const int budget = o.policy.budget;
  int bound = o.compaction == CompactionPolicy::kAlways ? cache_.blocks_for(budget) : budget;
  if (o.policy.kind == EvictionKind::kWindow)
    bound = std::min(bound, cache_.blocks_for(budget) + 1);
  if (o.policy.kind == EvictionKind::kSinksWindow) {
    bound = std::min(
        bound, cache_.blocks_for(o.policy.sinks) + cache_.blocks_for(budget - o.policy.sinks) + 1);
  }
  return std::min(cache_.blocks_for(kv_tokens), bound);
}

void Scheduler::arrive() {
  while (next_arrival_ < arrival_order_.size()) {
    RequestRun& r = requests_[static_cast<std::size_t>(arrival_order_[next_arrival_])];
    if (r.spec.arrival_step > now()) break;
    ++next_arrival_;
    queue_arrival(r);
  }
}

void Scheduler::deliver(std::int32_t id) {
  if (id < 0 || id >= num_requests()) {
    throw InternalError("simulator", "delivered request " + std::to_string(id) + " of " +
                                         std::to_string(num_requests()));
  }
  RequestRun& r = requests_[static_cast<std::size_t>(id)];
  if (!r.spec.external_arrival || r.arrived || r.fork_of >= 0) {
    throw InternalError("simulator",
                        "request " + std::to_string(id) + " is not waiting to be delivered");
  }
  --num_undelivered_;
  queue_arrival(r);
}

void Scheduler::queue_arrival(RequestRun& r) {
  r.arrived = true;
  emit(ev::RequestArrived{r.id, static_cast<std::int64_t>(r.spec.prompt_tokens.size()),
                          r.spec.max_new_tokens});
  int blocks = 0;
  if (auto reason = check_fits(r, &blocks)) {
    if (r.reserved) {  // what it mapped before delivery goes back
      cache_.free_sequence(SeqId(r.id));
      r.reserved = false;
    }
    r.phase = RequestPhase::kRejected;
    ++num_rejected_;
    emit(ev::RequestRejected{r.id, *reason, blocks});
    return;
  }
  r.phase = RequestPhase::kWaiting;
  waiting_.push_back(r.id);
  if (tiers_ != nullptr && tiers_->prefetches())
    tiers_->prefetch(r.id, r.tokens, prefix_->probe(r.tokens).hit_blocks);
}

int Scheduler::reserve_prefix(std::int32_t id) {
  RequestRun& r = request(id);
  if (prefix_ == nullptr || !r.spec.external_arrival || r.arrived || r.spec.kv_in_tokens <= 0 ||
      r.reserved || cache_.has_sequence(SeqId(r.id))) {
    throw InternalError("simulator", "request " + std::to_string(id) +
                                         " cannot reserve a cached prefix: that needs prefix "
                                         "caching and a request not delivered yet that takes K/V "
                                         "from elsewhere and has reserved nothing");
  }
  const PrefixProbe probe = prefix_->probe(r.tokens);
  if (probe.hit_blocks == 0) return 0;
  // Reserved blocks cannot be evicted, and a request waiting behind the head of the queue may
  // hold some: so that the head can always be admitted once nothing runs, reservations together
  // never hold more than the pool minus the largest request still to come.
  std::vector<char> held(static_cast<std::size_t>(cache_.pool().num_blocks()), 0);
  int reserved_blocks = 0, largest = 0;
  for (const RequestRun& q : requests_) {
    if (q.phase == RequestPhase::kFinished || q.phase == RequestPhase::kRejected) continue;
    const auto whole = static_cast<int>(q.spec.prompt_tokens.size()) + q.spec.max_new_tokens - 1;
    largest = std::max(largest, cache_.blocks_for(whole));
    if (!q.reserved) continue;
    for (const BlockId b : cache_.table(SeqId(q.id)).blocks) {
      char& h = held[static_cast<std::size_t>(b.value)];
      reserved_blocks += h == 0 ? 1 : 0;
      h = 1;
    }
  }
  // This request's blocks are the cache's longest match, a chain others may share: counted alone
  // (an upper bound).
  if (reserved_blocks + probe.hit_blocks > cache_.pool().num_blocks() - largest) return 0;
  PrefixLookupResult hit = prefix_->lookup_and_acquire(r.id, r.tokens, /*record=*/false);
  const auto hit_tokens = static_cast<int>(hit.hit_tokens);
  const auto blocks = static_cast<int>(hit.blocks.size());
  cache_.add_sequence_with_prefix(SeqId(r.id), std::move(hit.blocks), hit_tokens);
  r.reserved = true;
  r.reserved_tokens = hit_tokens;
  return blocks;
}

void Scheduler::release(std::int32_t id) {
  RequestRun& r = request(id);
  if (!r.held) {
    throw InternalError("simulator",
                        "request " + std::to_string(id) + " holds no blocks to release");
  }
  cache_.free_sequence(SeqId(r.id));
  r.held = false;
  --num_held_;
}

StepPlan Scheduler::schedule() {
  StepPlan w;
  w.budget = config_.max_tokens_per_step > 0 ? config_.max_tokens_per_step
                                             : std::numeric_limits<int>::max();
  grow_running(w);
  if (w.preempted) return w;
  swap_in(w);
  if (!swapped_.empty()) return w;  // swapped requests come back before new ones are admitted
  admit(w);
  return w;
}

// Appends slots for r's next chunk and plans it. False when the pool has no room.
bool Scheduler::plan_tokens(StepPlan& w, RequestRun& r) {
  const int n = std::min(r.pending(), w.budget);
  if (n <= 0) return true;  // nothing to do (or budget spent): keeps its blocks, waits a step
  if (config_.evicts_tokens()) {
    // The executor appends them one token at a time (eviction only gives blocks back), so they
    // are held back for it: without eviction, an upper bound.
    const int need = cache_.blocks_needed(SeqId(r.id), n);
    if (need > allocatable(w)) return false;
    w.entries.push_back({r.id, n, need});
    w.budget -= n;
    w.reserved_blocks += need;
    return true;
  }
  if (!cache_.append_slots(SeqId(r.id), n)) return false;
  w.entries.push_back({r.id, n});
  w.budget -= n;
  return true;
}

void Scheduler::grow_running(StepPlan& w) {
  const std::vector<std::int32_t> order = running_;  // admission order
  for (std::int32_t id : order) {
    RequestRun& r = requests_[static_cast<std::size_t>(id)];
    if (r.phase != RequestPhase::kRunning) continue;  // preempted earlier in this step
    const int n = std::min(r.pending(), w.budget);
    if (n <= 0) continue;
    bool victim_is_self = false;
    while (cache_.blocks_needed(SeqId(id), n) > allocatable(w)) {
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

void Scheduler::swap_in(StepPlan& w) {
  while (!swapped_.empty()) {
    RequestRun& r = requests_[static_cast<std::size_t>(swapped_.front())];
    const SeqId seq(r.id);
    const int blocks = cache_.blocks_for(r.num_computed);
    if (!has_room_to_run()) return;
    if (config_.allocator == AllocatorKind::kPaged && blocks > cache_.num_allocatable()) return;
    if (!cache_.add_sequence(seq)) return;  // contiguous: no free run for the reservation
    if (!cache_.append_slots(seq, r.num_computed)) {
      throw Error("simulator",
                  "internal: swap-in of request " + std::to_string(r.id) + " found no room");
    }
    const BlockTable& t = cache_.table(seq);
    swap_.swap_in(r.host_slots, cache_.storage(),
                  std::span<const BlockId>(t.blocks).subspan(0, static_cast<std::size_t>(blocks)));
    r.host_slots.clear();
    cache_full_blocks(r);  // re-offer the fresh copies (deduplicated against cached ones)
    swapped_.erase(swapped_.begin());
    r.phase = RequestPhase::kRunning;
    r.admit_order = ++admit_counter_;
    running_.push_back(r.id);
    emit(ev::SwappedIn{r.id, blocks});
    if (cache_.blocks_needed(seq, std::min(r.pending(), w.budget)) <= cache_.num_allocatable()) {
      // Room was checked just above; should planning still come up short, the request stays
      // running and is planned again next step, so the result needs no handling here.
      static_cast<void>(plan_tokens(w, r));
    }
  }
}

void Scheduler::admit(StepPlan& w) {
  while (!waiting_.empty()) {
    RequestRun& r = requests_[static_cast<std::size_t>(waiting_.front())];
    const SeqId seq(r.id);
    const int n = std::min(r.pending(), w.budget);
    if (n <= 0) return;  // token budget spent
    if (!has_room_to_run()) return;
    if (prefix_ != nullptr) {
      if (!prefix_admission_fits(r, w.budget)) return;
      const bool first = r.high_water == 0;
      if (r.reserved) {
        // Its reservation kept its cached prefix in place; the lookup below finds that prefix
        // again (nothing was evicted in between), and what else was cached since.
        cache_.free_sequence(SeqId(r.id));
        r.reserved = false;
      }
      start_sequence(r);  // maps the cached prefix: its prefill is skipped
      if (first) receive_kv(r);
    } else {
      // CacheBlend's chunks, or K/V from a prefill instance, come in whole at the first
      // admission, outside the token budget (as a prefix hit does), before the rest of the prompt
      // is planned.
      int blended = 0;
      if (config_.blend && r.num_computed == 0) {
        for (const int c : r.spec.blend_chunks) blended += c;
      }
      if (r.high_water == 0) blended += r.spec.kv_in_tokens;
      const int fresh = std::min(r.pending() - blended, w.budget);
      if (config_.allocator == AllocatorKind::kPaged &&
          cache_.blocks_to_admit(blended + fresh) > cache_.pool().num_free() - w.reserved_blocks)
        return;
      if (!cache_.add_sequence(seq)) return;  // contiguous: no free run (external fragmentation)
      if (listener_ != nullptr) listener_->on_sequence_started(r);
      if (blended > 0) {
        if (!cache_.append_slots(seq, blended)) {
          throw InternalError("simulator", "request " + std::to_string(r.id) +
                                               " has no room for the " + std::to_string(blended) +
                                               " chunk tokens its admission counted");
        }
        if (listener_ != nullptr) {
          if (r.spec.kv_in_tokens > 0) {
            listener_->on_kv_in(r, 0, blended);
          } else {
            listener_->on_blend(r, blended);
          }
        }
        r.num_computed = blended;
        r.high_water = std::max(r.high_water, blended);
        emit(ev::BlockTableUpdated{r.id, static_cast<std::int64_t>(cache_.table(seq).blocks.size()),
                                   blended});
      }
    }
    waiting_.pop_front();
    r.phase = RequestPhase::kRunning;
    r.admit_order = ++admit_counter_;
    if (!r.admitted_step) {
      r.admitted_step = now();
      prompt_tokens_ += static_cast<std::int64_t>(r.spec.prompt_tokens.size());
    }
    running_.push_back(r.id);
    if (!plan_tokens(w, r)) {
      throw Error("simulator",
                  "internal: admitted request " + std::to_string(r.id) + " found no room");
    }
    emit(ev::Admitted{r.id, static_cast<std::int64_t>(cache_.table(seq).blocks.size())});
  }
}

std::int32_t Scheduler::pick_victim() const {
  // running_ is in admission order, so scanning it backwards prefers the last admitted on ties.
  std::int32_t best = running_.back();
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    const RequestRun& r = requests_[static_cast<std::size_t>(*it)];
    const RequestRun& b = requests_[static_cast<std::size_t>(best)];
    switch (config_.victim) {
      case VictimPolicy::kLastAdmitted:
        return running_.back();
      case VictimPolicy::kLongest:
        if (cache_.table(SeqId(r.id)).num_tokens > cache_.table(SeqId(b.id)).num_tokens)
          best = r.id;
        break;
      case VictimPolicy::kLowestPriority:
        if (r.spec.priority < b.spec.priority) best = r.id;
        break;
    }
  }
  return best;
}

void Scheduler::preempt(std::int32_t id, StepPlan& w) {
  RequestRun& r = requests_[static_cast<std::size_t>(id)];
  const SeqId seq(id);
  auto planned = std::find_if(w.entries.begin(), w.entries.end(),
                              [&](const StepPlan::Entry& e) { return e.id == id; });
  if (planned != w.entries.end()) {
    w.budget += planned->tokens;
    w.reserved_blocks -= planned->reserved_blocks;
    w.entries.erase(planned);
  }
  running_.erase(std::find(running_.begin(), running_.end(), id));
  r.cached_blocks = 0;
  ++preemptions_;
  ++r.preemptions;
  w.preempted = true;
  const int blocks = cache_.blocks_for(r.num_computed);  // blocks holding computed K/V
  if (config_.preemption == PreemptionMode::kSwap && r.num_computed > 0 &&
      blocks <= swap_.num_free()) {
    const BlockTable& t = cache_.table(seq);
    // Slots appended for this step's (now cancelled) chunk hold nothing: only computed tokens move.
    if (t.num_tokens != r.num_computed) {
      emit(ev::BlockTableUpdated{id, blocks, r.num_computed});
    }
    emit(ev::Preempted{id, PreemptReason::kSwap, 0});
    r.host_slots = swap_.swap_out(cache_.storage(), std::span<const BlockId>(t.blocks).subspan(
                                                        0, static_cast<std::size_t>(blocks)));
    cache_.free_sequence(seq);
    r.phase = RequestPhase::kSwapped;
    swapped_.push_back(id);
    emit(ev::SwappedOut{id, blocks});
    return;
  }
  // Recompute (or swap with a full host tier): drop the K/V, recompute prompt + generated later
  // (with token eviction: from scratch through a fresh evictor, reproducing the same evictions).
  if (listener_ != nullptr) listener_->on_sequence_dropped(id);
  emit(ev::Preempted{id, PreemptReason::kRecompute, r.num_computed});
  cache_.free_sequence(seq);
  r.num_computed = 0;
  r.phase = RequestPhase::kWaiting;
  waiting_.push_front(id);
}

bool Scheduler::record_computed(StepPlan& plan, const StepPlan::Entry& entry) {
  RequestRun& r = requests_[static_cast<std::size_t>(entry.id)];
  const int first = r.num_computed;
  const int n = entry.tokens;
  const int prompt = static_cast<int>(r.spec.prompt_tokens.size());
  // A decode step feeds just the newest sampled token; anything else is (re)prefill.
  const bool decode = n == 1 && first >= prompt && first + 1 == static_cast<int>(r.tokens.size()) &&
                      first >= r.high_water;
  tokens_recomputed_ += std::max(0, std::min(first + n, r.high_water) - first);
  r.num_computed += n;
  r.high_water = std::max(r.high_water, r.num_computed);
  if (decode) {
    plan.decode_tokens += 1;
  } else {
    plan.prefill_tokens += n;
    prefill_total_ += n;
    emit(ev::PrefillChunk{r.id, first, n});
  }
  cache_full_blocks(r);
  return r.num_computed >= static_cast<int>(r.tokens.size());
}

void Scheduler::append_token(RequestRun& r, int token, bool stop) {
  r.tokens.push_back(token);
  ++r.generated;
  emit(ev::DecodeToken{r.id, r.num_computed - 1, token});
  if (stop || r.generated >= r.spec.max_new_tokens) finish(r);
}

void Scheduler::finish(RequestRun& r) {
  if (listener_ != nullptr) listener_->on_sequence_dropped(r.id);
  if (r.spec.hold_blocks) {
    r.held = true;
    ++num_held_;
  } else {
    cache_.free_sequence(SeqId(r.id));
  }
  running_.erase(std::find(running_.begin(), running_.end(), r.id));
  r.phase = RequestPhase::kFinished;
  r.finished_step = now();
  ++num_finished_;
  emit(ev::RequestFinished{r.id, static_cast<std::int64_t>(r.spec.prompt_tokens.size()),
                           r.generated});
}

void Scheduler::fill_metrics(StepMetrics& m) const {
  m.requests_waiting = static_cast<std::int32_t>(waiting_.size());
  m.requests_running = static_cast<std::int32_t>(running_.size());
  m.requests_swapped = static_cast<std::int32_t>(swapped_.size());
  m.requests_finished = num_finished_;
  m.requests_rejected = num_rejected_;
  m.preemptions = preemptions_;
  m.tokens_recomputed = tokens_recomputed_;
  m.prompt_tokens = prompt_tokens_;
  m.prefix_hit_tokens = prefix_hit_tokens_;
}

void Scheduler::check_invariants() const {
  int host_used = 0, reserved = 0;
  std::array<std::size_t, kNumRequestPhases> counted{};
  for (const RequestRun& r : requests_) {
    const std::string who = "request " + std::to_string(r.id);
    const bool has_seq = cache_.has_sequence(SeqId(r.id));
    if (r.reserved) ++reserved;
    if (!r.arrived) {
      // Only a reserved cached prefix (reserve_prefix) is mapped before delivery.
      if (has_seq != r.reserved || r.generated != 0 ||
          (has_seq && cache_.table(SeqId(r.id)).num_tokens != r.reserved_tokens))
        throw InternalError("simulator invariant", who + " acted before arriving");
      continue;
    }
    if (r.reserved && r.phase != RequestPhase::kWaiting)
      throw InternalError("simulator invariant", who + " left its reservation unused");
    ++counted[static_cast<int>(r.phase)];
    if (r.tokens.size() != r.spec.prompt_tokens.size() + static_cast<std::size_t>(r.generated) ||
        r.generated > r.spec.max_new_tokens) {
      throw InternalError("simulator invariant", who + " token count does not add up");
    }
    if (r.held && r.phase != RequestPhase::kFinished)
      throw InternalError("simulator invariant", who + " holds its blocks but has not finished");
    if ((r.phase == RequestPhase::kRunning || r.held || r.reserved) != has_seq) {
      throw InternalError("simulator invariant", who + (has_seq ? " holds blocks but is not running"
                                                                : " runs without blocks"));
    }
    if (has_seq && !r.reserved && !config_.evicts_tokens() &&
        cache_.table(SeqId(r.id)).num_tokens != r.num_computed) {
      throw InternalError("simulator invariant",
                          who + " cache holds " +
                              std::to_string(cache_.table(SeqId(r.id)).num_tokens) +
                              " tokens, scheduler says " + std::to_string(r.num_computed));
    }
    const int want_slots =
        r.phase == RequestPhase::kSwapped ? cache_.blocks_for(r.num_computed) : 0;
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
  if (host_used != swap_.num_used())
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
  if (cache_.sequences().size() !=
      running_.size() + static_cast<std::size_t>(num_held_) + static_cast<std::size_t>(reserved)) {
    throw InternalError("simulator invariant",
                        "cache sequences != running + held + reserved requests");
  }
}

}  // namespace kvscope

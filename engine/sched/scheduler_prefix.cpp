// Scheduler prefix caching and parallel sampling: admission on a cached prefix (its prefill
// skipped, what the KV tiers hold after it reloaded), indexing blocks as they fill, and forking
// parallel samples off a request after its prompt prefill (copy-on-write in the cache manager).
//
// Preemption with shared blocks: recompute releases the sequence's references (blocks others hold
// or the cache keeps stay put) and the request looks its tokens up again when readmitted; swap
// copies the sequence's K/V to the host tier and releases its references the same way, then
// swap-in writes into fresh private blocks and re-offers them to the cache (which deduplicates
// them against cached copies). No block another sequence holds is ever freed or moved.
#include <algorithm>
#include <string>

#include "engine/common/error.h"
#include "engine/sched/scheduler.h"

namespace kvscope {

int Scheduler::reload_from_tiers(RequestRun& r, int hit_blocks) {
  if (tiers_ == nullptr) return 0;
  const KvTiers::Reload run = tiers_->read_run(r.id, r.tokens, hit_blocks);
  r.tier_load_seconds += run.load_seconds;
  r.tier_exposed_seconds += run.exposed_seconds;
  const int n = run.blocks();
  if (n == 0) return 0;
  const SeqId seq(r.id);
  const int tokens = n * config_.block_size;
  if (!cache_.append_slots(seq, tokens)) {
    throw InternalError("simulator", "request " + std::to_string(r.id) + " has no room for the " +
                                         std::to_string(n) + " blocks its admission counted");
  }
  const std::span<const BlockId> table(cache_.table(seq).blocks);
  tiers_->place(r.id, run, table.subspan(static_cast<std::size_t>(hit_blocks)), hit_blocks);
  return tokens;
}

bool Scheduler::prefix_admission_fits(const RequestRun& r, int budget) const {
  // K/V from elsewhere comes in whole at the first admission, outside the token budget, as a hit.
  const int kv_in = r.high_water == 0 ? r.spec.kv_in_tokens : 0;
  const auto prompt = static_cast<int>(r.tokens.size());
  // A reservation's blocks (reserve_prefix) are among the hits, held: not allocatable, not
  // evictable.
  const PrefixProbe p = prefix_->probe(r.tokens);
  const int reload = tiers_ != nullptr ? tiers_->run_length(r.tokens, p.hit_blocks) : 0;
  // Blocks reloaded from the tiers need fresh pool blocks, as computed ones do.
  const int hit = (p.hit_blocks + reload) * config_.block_size;
  const int start = std::max(hit, kv_in);
  const int n = std::min(prompt - start, budget);
  // Hit blocks nobody holds are counted as allocatable now; mapping them takes them out.
  return cache_.blocks_for(start + n) - p.hit_blocks <= cache_.num_allocatable() - p.evictable_hits;
}

void Scheduler::start_sequence(RequestRun& r) {
  PrefixLookupResult hit = prefix_->lookup_and_acquire(r.id, r.tokens);
  const auto hit_tokens = static_cast<int>(hit.hit_tokens);
  r.cached_blocks = static_cast<int>(hit.blocks.size());
  cache_.add_sequence_with_prefix(SeqId(r.id), std::move(hit.blocks), hit_tokens);
  r.prefix_hit_tokens += hit_tokens;
  prefix_hit_tokens_ += hit_tokens;
  const int reloaded = reload_from_tiers(r, r.cached_blocks);
  r.tier_hit_tokens += reloaded;
  r.num_computed = hit_tokens + reloaded;
  r.high_water = std::max(r.high_water, r.num_computed);
}

void Scheduler::receive_kv(RequestRun& r) {
  const int from = r.num_computed, to = r.spec.kv_in_tokens;
  if (to <= from) return;  // none, or the cached prefix covers it
  const SeqId seq(r.id);
  if (from % config_.block_size != 0 || !cache_.append_slots(seq, to - from)) {
    throw InternalError("simulator", "request " + std::to_string(r.id) + " has no room for the " +
                                         std::to_string(to - from) +
                                         " tokens of K/V its admission counted after " +
                                         std::to_string(from) + " cached ones");
  }
  if (listener_ != nullptr) listener_->on_kv_in(r, from, to);
  r.num_computed = to;
  r.high_water = std::max(r.high_water, to);
  cache_full_blocks(r);  // what arrived is cached here too, for later requests
  emit(ev::BlockTableUpdated{r.id, static_cast<std::int64_t>(cache_.table(seq).blocks.size()), to});
}

void Scheduler::cache_full_blocks(RequestRun& r) {
  if (prefix_ == nullptr) return;
  const int full = r.num_computed / config_.block_size;
  if (full <= r.cached_blocks) return;
  const SeqId seq(r.id);
  const std::vector<BlockId>& table = cache_.table(seq).blocks;
  std::vector<BlockId> blocks(table.begin(), table.begin() + full);
  prefix_->insert(
      r.id,
      std::span<const int>(r.tokens).first(static_cast<std::size_t>(full) *
                                           static_cast<std::size_t>(config_.block_size)),
      blocks);
  for (int i = 0; i < full; ++i) {
    // insert() moved the references already when it switched to a cached copy.
    if (blocks[static_cast<std::size_t>(i)] != table[static_cast<std::size_t>(i)])
      cache_.replace_block(seq, i, blocks[static_cast<std::size_t>(i)]);
  }
  if (tiers_ != nullptr) tiers_->on_cached(r.tokens, r.cached_blocks, full, blocks);
  r.cached_blocks = full;
}

std::vector<std::int32_t> Scheduler::forks_due(RequestRun& lead) {
  if (lead.forked || lead.fork_children.empty() || lead.generated != 0) return {};
  lead.forked = true;
  return lead.fork_children;
}

void Scheduler::fork(const RequestRun& lead, std::int32_t child) {
  const auto prompt = static_cast<std::int64_t>(lead.spec.prompt_tokens.size());
  RequestRun& c = requests_[static_cast<std::size_t>(child)];
  c.arrived = true;
  emit(ev::RequestArrived{c.id, prompt, c.spec.max_new_tokens});
  cache_.fork_sequence(SeqId(lead.id), SeqId(c.id));
  c.num_computed = lead.num_computed;
  c.high_water = c.num_computed;
  c.cached_blocks = lead.cached_blocks;
  c.phase = RequestPhase::kRunning;
  c.admit_order = ++admit_counter_;
  c.admitted_step = now();
  prompt_tokens_ += prompt;
  prefix_hit_tokens_ += prompt;  // every prompt token is served by the shared blocks
  c.prefix_hit_tokens += prompt;
  running_.push_back(c.id);
  emit(ev::Admitted{c.id, static_cast<std::int64_t>(cache_.table(SeqId(c.id)).blocks.size())});
}

}  // namespace kvscope

// Simulator prefix caching and parallel sampling: the PrefixCache behind the paged allocator,
// admission on a cached prefix (its prefill skipped), indexing blocks as they fill, and forking
// parallel samples off a request after its prompt prefill (copy-on-write in the cache manager).
//
// Preemption with shared blocks: recompute releases the sequence's references (blocks others hold
// or the cache keeps stay put) and the request looks its tokens up again when readmitted; swap
// copies the sequence's K/V to the host tier and releases its references the same way, then
// swap-in writes into fresh private blocks and re-offers them to the cache (which deduplicates
// them against cached copies). No block another sequence holds is ever freed or moved.
#include <algorithm>
#include <cstring>
#include <string>

#include "engine/common/error.h"
#include "engine/prefix/block_hash.h"
#include "engine/sched/simulator.h"

namespace kvscope {

void Simulator::make_prefix_cache() {
  if (!config_.prefix_caching) return;  // the paged allocator it needs: checked in validate()
  if (cache_->layout().staging_bytes_per_sequence() > 0) {
    throw Error("cache.prefix_caching",
                "is not supported with KV format " + timeline_->header().kv_format +
                    " (its open group stays in per-sequence full-precision staging); use another "
                    "kv_dtype or turn prefix caching off");
  }
  PrefixCacheConfig pc;
  pc.block_size = config_.block_size;
  pc.index = config_.prefix_index;
  pc.policy = config_.cached_block_eviction;
  prefix_ = std::make_unique<PrefixCache>(cache_->pool(), pc, timeline_.get());
  cache_->set_block_source(prefix_.get());
  if (config_.tiers.empty()) return;
  const bool with_bytes = model_.weights != nullptr;
  tiers_ = std::make_unique<KvTierStore>(config_.tiers, cache_->layout().block_bytes(), with_bytes);
  tier_reloads_.assign(config_.tiers.size(), TierReloads{});
  if (with_bytes) tier_bytes_.resize(cache_->layout().block_bytes());
  prefix_->set_evict_observer(
      [this](BlockId b, std::uint64_t chain_key) { demote_to_tiers(b, chain_key); });
  if (config_.tier_prefetch) prefetcher_ = std::make_unique<TierPrefetcher>(*tiers_, tier_mutex_);
}

KvTierIo Simulator::tier_io(int tier) const {
  const std::lock_guard<std::mutex> lock(tier_mutex_);
  return tiers_->io(tier);
}

void Simulator::demote_to_tiers(BlockId b, std::uint64_t chain_key) {
  if (config_.tier_write_through) {
    const std::lock_guard<std::mutex> lock(tier_mutex_);
    if (tiers_->locate(chain_key) == 0) {  // written through when it was cached: nothing to write
      static_cast<void>(tiers_->touch(chain_key));
      return;
    }
  }
  if (!tier_bytes_.empty()) cache_->storage()->read_block(b, tier_bytes_.data());
  Event e;
  e.type = EventType::kTierWritten;
  e.step = step_;
  e.block = b.value;
  e.b = static_cast<std::int64_t>(chain_key);
  std::vector<TierMove> moves;
  {
    const std::lock_guard<std::mutex> lock(tier_mutex_);
    moves = tiers_->demote(chain_key, tier_bytes_.empty() ? nullptr : tier_bytes_.data());
    e.a = tiers_->locate(chain_key) ? 0 : -1;  // a refused write loses the block
  }
  timeline_->emit(e);
  for (const TierMove& m : moves) emit_tier_moved(m.key, m.from, m.to);
}

void Simulator::emit_tier_moved(std::uint64_t key, int from, int to) {
  Event e;
  e.type = EventType::kTierMoved;
  e.step = step_;
  e.logical = from;
  e.a = to;
  e.b = static_cast<std::int64_t>(key);
  timeline_->emit(e);
}

// Call with tier_mutex_ held.
int Simulator::tier_run(const RequestRun& r, int from_block,
                        std::vector<std::uint64_t>& keys) const {
  if (!tiers_) return 0;
  // Never the block holding the last prompt token: its logits must be computed.
  const int whole = (static_cast<int>(r.tokens.size()) - 1) / config_.block_size;
  if (whole <= from_block) return 0;
  chain_keys(std::span<const TokenId>(r.tokens).first(static_cast<std::size_t>(whole) *
                                                      static_cast<std::size_t>(config_.block_size)),
             config_.block_size, keys);
  int n = 0;
  while (from_block + n < whole && tiers_->locate(keys[static_cast<std::size_t>(from_block + n)]))
    ++n;
  return n;
}

void Simulator::prefetch_from_tiers(const RequestRun& r) {
  std::vector<std::uint64_t> keys;
  int from = 0, n = 0;
  {
    const std::lock_guard<std::mutex> lock(tier_mutex_);
    from = prefix_->probe(r.tokens).hit_blocks;
    n = tier_run(r, from, keys);
  }
  if (n == 0) return;
  // Staged bytes wait in memory until admission: past the budget, a request's blocks are read at
  // its admission instead.
  const std::size_t bytes = tier_bytes_.size() * static_cast<std::size_t>(n);
  if (prefetch_bytes_ + bytes > kPrefetchBudgetBytes) return;
  prefetch_bytes_ += bytes;
  prefetch_jobs_[r.id] =
      prefetcher_->submit(std::vector<std::uint64_t>(keys.begin() + from, keys.begin() + from + n));
}

int Simulator::reload_from_tiers(RequestRun& r, int hit_blocks) {
  // The request's prefetch, if it has one: admission waits for it (that wait is the part of the
  // load it did not hide) and takes the blocks it staged.
  std::shared_ptr<TierPrefetcher::Job> job;
  double exposed = 0.0;
  if (const auto it = prefetch_jobs_.find(r.id); it != prefetch_jobs_.end()) {
    job = it->second;
    prefetch_jobs_.erase(it);
    prefetch_bytes_ -= job->bytes.size();
    exposed += prefetcher_->wait(job);
  }
  std::vector<std::uint64_t> keys;
  const std::size_t bytes = cache_->layout().block_bytes();
  std::vector<std::byte> loaded;
  std::vector<int> from;  // the tier each reloaded block came from
  int n = 0;
  double load = 0.0;
  {
    // Read first, then allocate (below, without the lock): allocating may evict cached blocks
    // into the tiers, which may pass the blocks being reloaded further down or out.
    const std::lock_guard<std::mutex> lock(tier_mutex_);
    const int run = tier_run(r, hit_blocks, keys);
    loaded.resize(tier_bytes_.empty() ? 0 : static_cast<std::size_t>(run) * bytes);
    for (; n < run; ++n) {
      const std::uint64_t key = keys[static_cast<std::size_t>(hit_blocks + n)];
      std::byte* out =
          loaded.empty() ? nullptr : loaded.data() + static_cast<std::size_t>(n) * bytes;
      std::optional<int> tier;
      double took = 0.0;
      if (const std::optional<std::size_t> staged = job ? job->staged_at(key) : std::nullopt) {
        tier = tiers_->touch(key);
        if (out != nullptr) std::memcpy(out, job->bytes.data() + *staged * bytes, bytes);
        took = job->seconds[*staged];
      } else {
        const int where = *tiers_->locate(key);
        const double before = tiers_->io(where).read_seconds;
        tier = tiers_->load(key, out);
        took = tiers_->io(where).read_seconds - before;
        exposed += took;
        if (!tier) emit_tier_moved(key, where, -1);  // failed its check: dropped
      }
      load += took;
      if (!tier) break;  // failed its check: recomputed from here on
      TierReloads& t = tier_reloads_[static_cast<std::size_t>(*tier)];
      ++t.blocks;
      t.seconds += took;
      from.push_back(*tier);
    }
  }
  r.tier_load_seconds += load;
  r.tier_exposed_seconds += exposed;
  tier_load_seconds_ += load;
  tier_exposed_seconds_ += exposed;
  if (n == 0) return 0;
  const SeqId seq(r.id);
  const int tokens = n * config_.block_size;
  if (!cache_->append_slots(seq, tokens)) {
    throw InternalError("simulator", "request " + std::to_string(r.id) + " has no room for the " +
                                         std::to_string(n) + " blocks its admission counted");
  }
  const std::vector<BlockId>& table = cache_->table(seq).blocks;
  for (int i = 0; i < n; ++i) {
    const BlockId b = table[static_cast<std::size_t>(hit_blocks + i)];
    if (!loaded.empty())
      cache_->storage()->write_block(b, loaded.data() + static_cast<std::size_t>(i) * bytes);
    Event e;
    e.type = EventType::kTierReloaded;
    e.step = step_;
    e.request = r.id;
    e.block = b.value;
    e.logical = hit_blocks + i;
    e.a = from[static_cast<std::size_t>(i)];
    e.b = tiers_->options(from[static_cast<std::size_t>(i)]).medium == TierMedium::kDisk ? 1 : 0;
    timeline_->emit(e);
  }
  return tokens;
}

bool Simulator::prefix_admission_fits(const RequestRun& r, int budget) const {
  const PrefixProbe p = prefix_->probe(r.tokens);
  std::vector<std::uint64_t> keys;
  int reload = 0;
  if (tiers_) {
    const std::lock_guard<std::mutex> lock(tier_mutex_);
    reload = tier_run(r, p.hit_blocks, keys);
  }
  // Blocks reloaded from the tiers need fresh pool blocks, as computed ones do.
  const int hit = (p.hit_blocks + reload) * config_.block_size;
  const int n = std::min(static_cast<int>(r.tokens.size()) - hit, budget);
  // Hit blocks nobody holds are counted as allocatable now; mapping them takes them out.
  return cache_->blocks_for(hit + n) - p.hit_blocks <= cache_->num_allocatable() - p.evictable_hits;
}

void Simulator::start_sequence(RequestRun& r) {
  PrefixLookupResult hit = prefix_->lookup_and_acquire(r.id, r.tokens);
  const auto hit_tokens = static_cast<int>(hit.hit_tokens);
  r.cached_blocks = static_cast<int>(hit.blocks.size());
  cache_->add_sequence_with_prefix(SeqId(r.id), std::move(hit.blocks), hit_tokens);
  r.prefix_hit_tokens += hit_tokens;
  prefix_hit_tokens_ += hit_tokens;
  const int reloaded = reload_from_tiers(r, r.cached_blocks);
  r.tier_hit_tokens += reloaded;
  tier_hit_tokens_ += reloaded;
  r.num_computed = hit_tokens + reloaded;
  r.high_water = std::max(r.high_water, r.num_computed);
}

void Simulator::cache_full_blocks(RequestRun& r) {
  if (!prefix_) return;
  const int full = r.num_computed / config_.block_size;
  if (full <= r.cached_blocks) return;
  const SeqId seq(r.id);
  const std::vector<BlockId>& table = cache_->table(seq).blocks;
  std::vector<BlockId> blocks(table.begin(), table.begin() + full);
  prefix_->insert(
      r.id,
      std::span<const int>(r.tokens).first(static_cast<std::size_t>(full) *
                                           static_cast<std::size_t>(config_.block_size)),
      blocks);
  for (int i = 0; i < full; ++i) {
    // insert() moved the references already when it switched to a cached copy.
    if (blocks[static_cast<std::size_t>(i)] != table[static_cast<std::size_t>(i)])
      cache_->replace_block(seq, i, blocks[static_cast<std::size_t>(i)]);
  }
  if (tiers_ && config_.tier_write_through) write_through(r, r.cached_blocks, full, blocks);
  r.cached_blocks = full;
}

void Simulator::write_through(const RequestRun& r, int first, int end,
                              const std::vector<BlockId>& blocks) {
  std::vector<std::uint64_t> keys;
  chain_keys(std::span<const TokenId>(r.tokens).first(static_cast<std::size_t>(end) *
                                                      static_cast<std::size_t>(config_.block_size)),
             config_.block_size, keys);
  for (int i = first; i < end; ++i) {
    const std::uint64_t key = keys[static_cast<std::size_t>(i)];
    {
      const std::lock_guard<std::mutex> lock(tier_mutex_);
      if (tiers_->locate(key) == 0) continue;  // the first tier has it already
    }
    demote_to_tiers(blocks[static_cast<std::size_t>(i)], key);
  }
}

void Simulator::fork_samples(RequestRun& lead, NextToken from) {
  lead.forked = true;
  const auto prompt = static_cast<std::int64_t>(lead.spec.prompt_tokens.size());
  for (std::int32_t id : lead.fork_children) {
    RequestRun& c = requests_[static_cast<std::size_t>(id)];
    c.arrived = true;
    emit(EventType::kRequestArrived, c.id, prompt, c.spec.max_new_tokens);
    cache_->fork_sequence(SeqId(lead.id), SeqId(c.id));
    c.num_computed = lead.num_computed;
    c.high_water = c.num_computed;
    c.cached_blocks = lead.cached_blocks;
    c.phase = RequestPhase::kRunning;
    c.admit_order = ++admit_counter_;
    c.admitted_step = step_;
    prompt_tokens_ += prompt;
    prefix_hit_tokens_ += prompt;  // every prompt token is served by the shared blocks
    c.prefix_hit_tokens += prompt;
    running_.push_back(c.id);
    emit(EventType::kAdmitted, c.id,
         static_cast<std::int64_t>(cache_->table(SeqId(c.id)).blocks.size()));
    sample(c, from);
  }
}

}  // namespace kvscope

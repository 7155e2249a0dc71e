// Mooncake replay: an event-driven FCFS scheduler over BlockPool + PrefixCache (block ids only).
#include "engine/trace/mooncake_replay.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <numeric>
#include <queue>
#include <string>
#include <unordered_set>

#include "engine/common/error.h"

namespace kvscope {
namespace {

struct Running {
  double end_ms;
  std::size_t request;
  bool operator>(const Running& o) const {
    return end_ms != o.end_ms ? end_ms > o.end_ms : request > o.request;
  }
};

std::int64_t lifetime_blocks(const MooncakeRequest& r, int bs) {
  return (r.input_length + r.output_length + bs - 1) / bs;
}

// Follows the pool's cached blocks by key for the tier chain, and forwards every event: a block
// cached by the admission in progress takes the key of its logical index in `keys`; a cached block
// the pool evicts is demoted into the chain.
class TierWatch final : public EventSink {
 public:
  TierWatch(TierChain& chain, EventSink* next, int num_blocks)
      : chain_(chain), next_(next), key_of_(static_cast<std::size_t>(num_blocks), 0) {}
  std::vector<std::uint64_t> keys;  // the admission in progress: its prompt's chain_keys

  bool on_device(std::uint64_t key) const { return on_device_.count(key) != 0; }
  void emit(const Event& e) override {
    if (e.type == EventType::kBlockCached) {
      if (e.logical < 0 || static_cast<std::size_t>(e.logical) >= keys.size()) {
        throw InternalError("mooncake replay", "block cached at logical index " +
                                                   std::to_string(e.logical) + " of a prompt of " +
                                                   std::to_string(keys.size()) + " full blocks");
      }
      const std::uint64_t key = keys[static_cast<std::size_t>(e.logical)];
      key_of_.at(static_cast<std::size_t>(e.block)) = key;
      on_device_.insert(key);
    } else if (e.type == EventType::kCachedBlockEvicted) {
      const std::uint64_t key = key_of_.at(static_cast<std::size_t>(e.block));
      on_device_.erase(key);
      chain_.demote(key);
    }
    if (next_ != nullptr) next_->emit(e);
  }

 private:
  TierChain& chain_;
  EventSink* next_;
  std::vector<std::uint64_t> key_of_;  // by physical block: the key it was cached under
  std::unordered_set<std::uint64_t> on_device_;
};

// The pool's size in blocks, after checking the config's numbers.
std::int64_t checked_pool_blocks(const MooncakeTrace& trace, const MooncakeReplayConfig& config) {
  const int bs = config.block_size;
  if (bs <= 0)
    fail_expected("mooncake replay: block_size", "a positive integer", std::to_string(bs));
  if (config.capacity_tokens < 0) {
    fail_expected("mooncake replay: capacity_tokens", "0 (unlimited) or a positive count",
                  std::to_string(config.capacity_tokens));
  }
  if (!(config.time_scale > 0) || !(config.step_ms > 0)) {
    fail_expected("mooncake replay: time_scale and step_ms", "positive numbers",
                  std::to_string(config.time_scale) + " and " + std::to_string(config.step_ms));
  }
  std::int64_t blocks = config.capacity_tokens / bs;
  if (config.capacity_tokens == 0) {  // unlimited: every block of every request at once fits
    blocks = 1;
    for (const auto& r : trace.requests) blocks += lifetime_blocks(r, bs);
  }
  if (blocks <= 0 || blocks > INT32_MAX) {
    fail_expected("mooncake replay: capacity", "between 1 block and 2^31 blocks",
                  std::to_string(blocks) + " blocks");
  }
  return blocks;
}

// The FCFS scheduler: requests wait in arrival order; one is admitted when every block of its
// lifetime is allocatable, and runs for 1 + output_length steps holding them.
class FcfsReplay {
 public:
  FcfsReplay(const MooncakeTrace& trace, const MooncakeReplayConfig& config, BlockPool& pool,
             PrefixCache& cache, TierChain* chain, TierWatch* watch, MooncakeReplayResult& res)
      : reqs_(trace.requests),
        config_(config),
        bs_(config.block_size),
        pool_(pool),
        cache_(cache),
        chain_(chain),
        watch_(watch),
        res_(res),
        tier_hit_tokens_(config.tiers.size(), 0),
        tables_(trace.requests.size()) {}

  // [tier] prompt tokens read from it
  const std::vector<std::int64_t>& tier_hit_tokens() const { return tier_hit_tokens_; }

  // Request i arrives: what ended before it completes first.
  void arrive(std::size_t i) {
    const double now = reqs_[i].timestamp_ms / config_.time_scale;
    finish_until(now);
    waiting_.push_back(i);
    res_.peak_waiting = std::max(res_.peak_waiting, static_cast<std::int32_t>(waiting_.size()));
    admit_waiting(now);
  }

  void finish_until(double t) {
    while (!running_.empty() && running_.top().end_ms <= t) {
      const Running done = running_.top();
      running_.pop();
      cache_.set_step(step_of(done.end_ms));
      cache_.release(tables_[done.request]);
      held_unshared_ -= static_cast<std::int64_t>(tables_[done.request].size());
      tables_[done.request].clear();
      tables_[done.request].shrink_to_fit();
      res_.end_ms = std::max(res_.end_ms, done.end_ms);
      admit_waiting(done.end_ms);
    }
  }

 private:
  std::int32_t step_of(double t) const {
    return static_cast<std::int32_t>(std::min(t / config_.step_ms, 2.0e9));
  }

  void admit_waiting(double now) {
    while (!waiting_.empty()) {
      const std::size_t i = waiting_.front();
      const std::int64_t need = lifetime_blocks(reqs_[i], bs_);
      if (need > pool_.num_blocks()) {
        ++res_.rejected;
        waiting_.pop_front();
        continue;
      }
      if (cache_.num_allocatable() < need) return;  // wait for completions
      waiting_.pop_front();
      admit(i, need, now);
    }
  }

  void admit(std::size_t i, std::int64_t need, double now) {
    const MooncakeRequest& r = reqs_[i];
    cache_.set_step(step_of(now));
    const auto id = static_cast<std::int32_t>(i);
    mooncake_prompt_tokens(r, tokens_);
    PrefixLookupResult hit = cache_.lookup_and_acquire(id, tokens_);
    if (watch_ != nullptr) count_tier_hits(hit.blocks.size());
    std::vector<BlockId>& table = tables_[i];
    table = std::move(hit.blocks);
    while (static_cast<std::int64_t>(table.size()) < need) {
      const std::optional<BlockId> b = cache_.allocate();
      if (!b)
        throw Error("mooncake replay", "allocation failed although " + std::to_string(need) +
                                           " blocks were allocatable");
      table.push_back(*b);
    }
    cache_.insert(id, tokens_, table);
    held_unshared_ += need;
    ++res_.admitted;
    running_.push({now + static_cast<double>(1 + r.output_length) * config_.step_ms, i});
    res_.peak_running = std::max(res_.peak_running, static_cast<std::int32_t>(running_.size()));
    res_.peak_blocks_held =
        std::max(res_.peak_blocks_held, pool_.num_used() - cache_.num_evictable());
    res_.peak_blocks_no_sharing = std::max(res_.peak_blocks_no_sharing, held_unshared_);
    res_.peak_blocks_cached = std::max(res_.peak_blocks_cached, cache_.num_cached());
  }

  // Past the device's hit of `device_blocks` blocks, the prompt goes on in the tiers (never its
  // last token, as on the device) until a block is nowhere. A block still on the device there
  // (the device's lookup stopped before it) counts apart, and is not read from a tier.
  void count_tier_hits(std::size_t device_blocks) {
    chain_keys(tokens_, bs_, watch_->keys);
    const std::size_t usable =
        tokens_.empty() ? 0 : (tokens_.size() - 1) / static_cast<std::size_t>(bs_);
    for (std::size_t k = device_blocks; k < usable; ++k) {
      if (watch_->on_device(watch_->keys[k])) {
        res_.device_behind_reload_tokens += bs_;
      } else if (const std::optional<int> t = chain_->find(watch_->keys[k])) {
        tier_hit_tokens_[static_cast<std::size_t>(*t)] += bs_;
      } else {
        break;
      }
    }
  }

  const std::vector<MooncakeRequest>& reqs_;
  const MooncakeReplayConfig& config_;
  const int bs_;
  BlockPool& pool_;
  PrefixCache& cache_;
  TierChain* chain_;  // nullptr without tiers
  TierWatch* watch_;  // nullptr without tiers
  MooncakeReplayResult& res_;
  std::vector<std::int64_t> tier_hit_tokens_;  // [tier]
  std::vector<std::vector<BlockId>> tables_;   // [request] its blocks while it runs
  std::priority_queue<Running, std::vector<Running>, std::greater<>> running_;
  std::deque<std::size_t> waiting_;
  std::vector<TokenId> tokens_;  // the admission in progress: its prompt
  std::int64_t held_unshared_ = 0;
};

}  // namespace

std::int64_t MooncakeReplayResult::all_hit_tokens() const {
  std::int64_t n = cache.hit_tokens + device_behind_reload_tokens;
  for (const MooncakeTierResult& t : tiers) n += t.hit_tokens;
  return n;
}

MooncakeReplayResult replay_mooncake(const MooncakeTrace& trace, const MooncakeReplayConfig& config,
                                     EventSink* sink) {
  const auto start = std::chrono::steady_clock::now();
  const auto& reqs = trace.requests;
  BlockPool pool(static_cast<int>(checked_pool_blocks(trace, config)));
  std::optional<TierChain> chain;
  std::optional<TierWatch> watch;
  if (!config.tiers.empty()) {
    require_prefix_caching_for_tiers(true, config.prefix_caching, "mooncake replay: tiers");
    if (config.capacity_tokens == 0) {
      fail_expected("mooncake replay: tiers",
                    "a bounded pool (an unlimited one never evicts a block into a tier)",
                    "capacity_tokens 0 (unlimited)");
    }
    chain.emplace(config.tiers);
    watch.emplace(*chain, sink, pool.num_blocks());
  }
  PrefixCache cache(pool,
                    PrefixCacheConfig{config.block_size, config.index, config.policy,
                                      config.prefix_caching, nullptr},
                    watch ? &*watch : sink);

  MooncakeReplayResult res;
  res.requests = static_cast<std::int64_t>(reqs.size());
  res.num_blocks = pool.num_blocks();
  // Arrival order: by timestamp, file order among equals.
  std::vector<std::size_t> order(reqs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return reqs[a].timestamp_ms < reqs[b].timestamp_ms;
  });

  FcfsReplay replay(trace, config, pool, cache, chain ? &*chain : nullptr,
                    watch ? &*watch : nullptr, res);
  for (std::size_t i : order) replay.arrive(i);
  replay.finish_until(std::numeric_limits<double>::infinity());
  res.cache = cache.metrics();
  if (chain) chain->check_invariants();
  for (std::size_t t = 0; t < config.tiers.size(); ++t) {
    res.tiers.push_back(MooncakeTierResult{chain->spec(static_cast<int>(t)),
                                           chain->stats(static_cast<int>(t)),
                                           replay.tier_hit_tokens()[t]});
  }
  res.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return res;
}

}  // namespace kvscope

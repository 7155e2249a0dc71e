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

}  // namespace

std::int64_t MooncakeReplayResult::all_hit_tokens() const {
  std::int64_t n = cache.hit_tokens + device_behind_reload_tokens;
  for (const MooncakeTierResult& t : tiers) n += t.hit_tokens;
  return n;
}

MooncakeReplayResult replay_mooncake(const MooncakeTrace& trace, const MooncakeReplayConfig& config,
                                     EventSink* sink) {
  const auto start = std::chrono::steady_clock::now();
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
  const auto& reqs = trace.requests;
  std::int64_t blocks = config.capacity_tokens / bs;
  if (config.capacity_tokens == 0) {  // unlimited: every block of every request at once fits
    blocks = 1;
    for (const auto& r : reqs) blocks += lifetime_blocks(r, bs);
  }
  if (blocks <= 0 || blocks > INT32_MAX) {
    fail_expected("mooncake replay: capacity", "between 1 block and 2^31 blocks",
                  std::to_string(blocks) + " blocks");
  }
  BlockPool pool(static_cast<int>(blocks));
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
  PrefixCache cache(
      pool, PrefixCacheConfig{bs, config.index, config.policy, config.prefix_caching, nullptr},
      watch ? &*watch : sink);
  std::vector<std::int64_t> tier_hit_tokens(config.tiers.size(), 0);

  MooncakeReplayResult res;
  res.requests = static_cast<std::int64_t>(reqs.size());
  res.num_blocks = pool.num_blocks();
  // Arrival order: by timestamp, file order among equals.
  std::vector<std::size_t> order(reqs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return reqs[a].timestamp_ms < reqs[b].timestamp_ms;
  });

  std::vector<std::vector<BlockId>> tables(reqs.size());
  std::priority_queue<Running, std::vector<Running>, std::greater<>> running;
  std::deque<std::size_t> waiting;
  std::vector<TokenId> tokens;
  std::int64_t held_unshared = 0;
  auto step_of = [&](double t) {
    return static_cast<std::int32_t>(std::min(t / config.step_ms, 2.0e9));
  };

  auto admit_waiting = [&](double now) {
    while (!waiting.empty()) {
      const std::size_t i = waiting.front();
      const MooncakeRequest& r = reqs[i];
      const std::int64_t need = lifetime_blocks(r, bs);
      if (need > pool.num_blocks()) {
        ++res.rejected;
        waiting.pop_front();
        continue;
      }
      if (cache.num_allocatable() < need) return;  // wait for completions
      waiting.pop_front();
      cache.set_step(step_of(now));
      const auto id = static_cast<std::int32_t>(i);
      mooncake_prompt_tokens(r, tokens);
      PrefixLookupResult hit = cache.lookup_and_acquire(id, tokens);
      if (watch) {
        // Past the device's hit, the prompt goes on in the tiers (never its last token, as on
        // the device) until a block is nowhere. A block still on the device there (the device's
        // lookup stopped before it) counts apart, and is not read from a tier.
        chain_keys(tokens, bs, watch->keys);
        const std::size_t usable =
            tokens.empty() ? 0 : (tokens.size() - 1) / static_cast<std::size_t>(bs);
        for (std::size_t k = hit.blocks.size(); k < usable; ++k) {
          if (watch->on_device(watch->keys[k])) {
            res.device_behind_reload_tokens += bs;
          } else if (const std::optional<int> t = chain->find(watch->keys[k])) {
            tier_hit_tokens[static_cast<std::size_t>(*t)] += bs;
          } else {
            break;
          }
        }
      }
      std::vector<BlockId>& table = tables[i];
      table = std::move(hit.blocks);
      while (static_cast<std::int64_t>(table.size()) < need) {
        const std::optional<BlockId> b = cache.allocate();
        if (!b)
          throw Error("mooncake replay", "allocation failed although " + std::to_string(need) +
                                             " blocks were allocatable");
        table.push_back(*b);
      }
      cache.insert(id, tokens, table);
      held_unshared += need;
      ++res.admitted;
      running.push({now + static_cast<double>(1 + r.output_length) * config.step_ms, i});
      res.peak_running = std::max(res.peak_running, static_cast<std::int32_t>(running.size()));
      res.peak_blocks_held =
          std::max(res.peak_blocks_held, pool.num_used() - cache.num_evictable());
      res.peak_blocks_no_sharing = std::max(res.peak_blocks_no_sharing, held_unshared);
      res.peak_blocks_cached = std::max(res.peak_blocks_cached, cache.num_cached());
    }
  };
  auto finish_until = [&](double t) {
    while (!running.empty() && running.top().end_ms <= t) {
      const Running done = running.top();
      running.pop();
      cache.set_step(step_of(done.end_ms));
      cache.release(tables[done.request]);
      held_unshared -= static_cast<std::int64_t>(tables[done.request].size());
      tables[done.request].clear();
      tables[done.request].shrink_to_fit();
      res.end_ms = std::max(res.end_ms, done.end_ms);
      admit_waiting(done.end_ms);
    }
  };

  for (std::size_t i : order) {
    const double now = reqs[i].timestamp_ms / config.time_scale;
    finish_until(now);
    waiting.push_back(i);
    res.peak_waiting = std::max(res.peak_waiting, static_cast<std::int32_t>(waiting.size()));
    admit_waiting(now);
  }
  finish_until(std::numeric_limits<double>::infinity());
  res.cache = cache.metrics();
  if (chain) chain->check_invariants();
  for (std::size_t t = 0; t < config.tiers.size(); ++t) {
    res.tiers.push_back(MooncakeTierResult{chain->spec(static_cast<int>(t)),
                                           chain->stats(static_cast<int>(t)), tier_hit_tokens[t]});
  }
  res.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return res;
}

}  // namespace kvscope

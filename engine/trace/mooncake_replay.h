// Replays a Mooncake trace through the real allocator (BlockPool) and prefix cache (PrefixCache)
// on block ids only, no model compute, at full scale.
//
// Simplified serving model (documented in docs/concepts/prefix-caching.md):
// - request i arrives at timestamp_ms / time_scale; requests are admitted first come first
//   served (head of line blocks the queue);
// - admission needs num_allocatable() >= ceil((input + output) / block_size) blocks (the whole
//   lifetime's blocks, reserved up front, ignoring what the prefix hit will save);
// - at admission: prefix lookup + acquire, the rest allocated (evicting cached blocks as
//   needed), then the prompt's full blocks are inserted into the cache;
// - the request holds its blocks for (1 + output_length) steps of step_ms (one prefill step, one
//   decode step per output token), then releases them (cached blocks stay reusable);
// - a request larger than the whole pool is rejected;
// - with tiers (host, disk, ...: a TierChain), a cached block the pool evicts moves to the first
//   tier (write-back on eviction), and an admission that misses on the device goes on looking up
//   the prompt's next blocks in the tiers: each one found there is a prefill the tier saves (a
//   reload instead of a recompute). The pool's own decisions are the same with or without tiers.
#pragma once

#include <cstdint>

#include "engine/prefix/prefix_cache.h"
#include "engine/tiers/tier_chain.h"
#include "engine/trace/mooncake.h"

namespace kvscope {

struct MooncakeReplayConfig {
  int block_size = kMooncakeBlockTokens;
  std::int64_t capacity_tokens = 0;  // pool size in tokens; 0 = unlimited (never evicts)
  IndexKind index = IndexKind::kHashChain;
  EvictionPolicyKind policy = EvictionPolicyKind::kLru;
  bool prefix_caching = true;
  double time_scale = 1.0;      // >1 replays faster (more concurrency)
  double step_ms = 20.0;        // duration of one prefill or decode step
  std::vector<TierSpec> tiers;  // below the pool, first = fastest; empty = none
};

struct MooncakeTierResult {
  TierSpec spec;
  TierStats stats;
  std::int64_t hit_tokens = 0;  // prompt tokens found in this tier (prefill it saved)
};

struct MooncakeReplayResult {
  std::int64_t requests = 0;
  std::int64_t admitted = 0;
  std::int64_t rejected = 0;                // larger than the whole pool
  std::int32_t num_blocks = 0;              // pool size used
  std::int32_t peak_blocks_held = 0;        // distinct blocks held by running requests
  std::int64_t peak_blocks_no_sharing = 0;  // what the running requests would hold unshared
  std::int32_t peak_blocks_cached = 0;
  std::int32_t peak_running = 0;
  std::int32_t peak_waiting = 0;
  double end_ms = 0.0;        // simulated time when the last request finished
  double wall_seconds = 0.0;  // time the replay took on this machine
  PrefixCacheMetrics cache;
  std::vector<MooncakeTierResult> tiers;  // as configured
  // Prompt blocks still on the device behind a block reloaded from a tier (the device's own
  // lookup stops at its first miss): tokens, counted apart from every tier's hits.
  std::int64_t device_behind_reload_tokens = 0;
  // Every prompt token found anywhere: the device's hits, the tiers' and the blocks behind them.
  std::int64_t all_hit_tokens() const;
};

// Throws kvscope::Error on a bad configuration (block size, capacity, time scale).
MooncakeReplayResult replay_mooncake(const MooncakeTrace& trace, const MooncakeReplayConfig& config,
                                     EventSink* sink = nullptr);

}  // namespace kvscope

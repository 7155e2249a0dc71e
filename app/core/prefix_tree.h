// PrefixTreeFold: the prefix cache's tree at any step, rebuilt from the Timeline's events (the
// UI cannot ask the Simulator, which lives on its worker). Nodes are cached blocks linked to the
// block holding the preceding prefix (BlockCached's parent field), with the lookups that reused
// them; every request's latest prefix lookup keeps its hit tokens and miss reason.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "engine/kv/event_payloads.h"
#include "engine/prefix/miss_reason.h"
#include "engine/trace/timeline.h"

namespace kvscope::ui {

struct PrefixNode {
  std::int32_t block = -1;
  std::int32_t parent = -1;     // block of the preceding prefix; -1 for a first block
  std::int32_t logical = 0;     // logical block index (depth in the tree)
  std::int32_t cached_by = -1;  // request that inserted it
  std::int32_t cached_step = 0;
  std::int64_t hits = 0;   // lookups that mapped it since it was cached
  int reloaded_from = -1;  // its bytes came from a KV tier: 0 host RAM, 1 disk; -1 computed
};

// One KV tier behind the prefix cache, as of the step folded last.
struct TierRow {
  bool disk = false;  // its medium: disk, else host RAM
  std::int64_t held = 0;
  std::int64_t capacity = 0;
  std::int64_t written = 0;   // cached blocks written back to it (first tier only)
  std::int64_t reloaded = 0;  // blocks reloaded from it into the pool
};

struct PrefixLookupRow {
  std::int32_t request = -1;
  std::int32_t step = 0;
  std::int64_t prompt_tokens = 0;
  std::int64_t hit_tokens = 0;
  MissReason reason = MissReason::kNone;
  std::int64_t diverged_at = -1;   // kDiverged: first token no cached prefix matched
  std::int32_t evicted_step = -1;  // kEvicted: when the first missing block was evicted
  int lookups = 0;                 // lookups of this request so far (readmissions add one)
  std::int64_t tier_tokens = 0;    // after the lookup: prompt tokens reloaded from KV tiers
};

// A cached block that lives in a KV tier: the pool evicted it (write-back) or it was copied there
// as it was cached (write-through).
struct TierBlock {
  int tier = 0;
  std::int32_t cached_by = -1;  // request that cached it (-1: not known)
  std::int32_t logical = 0;     // its block index in that request's sequence
  std::int32_t since_step = 0;  // written to this tier (or passed down to it) at this step
};

class PrefixTreeFold {
 public:
  // Starts over for a pool of `num_blocks` blocks.
  void reset(int num_blocks, int block_size);
  // Folds one event in (events must come in Timeline order). Bad block ids are ignored.
  void apply(const Event& e);

  const std::map<std::int32_t, PrefixNode>& nodes() const { return nodes_; }  // by block id
  const std::map<std::int32_t, PrefixLookupRow>& lookups() const { return lookups_; }
  std::int64_t evictions() const { return evictions_; }
  std::int64_t lookups_total() const { return lookups_total_; }
  std::int64_t hit_tokens_total() const { return hit_tokens_total_; }
  // The KV tiers (empty when the run has none) and the write-backs a tier refused.
  const std::vector<TierRow>& tiers() const { return tiers_; }
  // Every block the tiers hold now, by chain key.
  const std::map<std::uint64_t, TierBlock>& tier_blocks() const { return tier_blocks_; }
  std::int64_t tier_writes_refused() const { return tier_writes_refused_; }
  // Children of each node, sorted by block id, and the roots (first blocks).
  std::vector<std::int32_t> roots() const;
  std::vector<std::int32_t> children(std::int32_t block) const;

 private:
  bool block_ok(std::int32_t block) const;
  // A block at `logical` in the request's table (shared: a prefix hit, else fresh bytes).
  void map_block(std::int32_t request, std::int32_t block, std::int32_t logical, bool shared);
  TierRow& tier_row(std::int64_t tier);
  void on_tier_reloaded(const ev::TierReloaded& p);
  void on_tier_written(const ev::TierWritten& p, std::int32_t step);
  void on_tier_moved(const ev::TierMoved& p, std::int32_t step);
  void on_tier_held(const ev::TierHeld& p);
  void on_cached(const ev::BlockCached& p, std::int32_t step);
  void on_evicted(std::int32_t block);
  void on_lookup(const ev::PrefixLookup& p, std::int32_t step);
  int num_blocks_ = 0;
  int block_size_ = 0;
  std::map<std::int32_t, PrefixNode> nodes_;
  std::map<std::int32_t, std::vector<std::int32_t>> children_;
  std::map<std::int32_t, PrefixLookupRow> lookups_;
  std::map<std::int32_t, std::vector<std::int32_t>> pending_shared_;  // request -> blocks mapped
  std::map<std::int32_t, std::int64_t> prompt_tokens_;                // request -> prompt length
  std::map<std::int32_t, std::vector<std::int32_t>> tables_;          // request -> block table
  std::map<std::int32_t, int> reloaded_;  // block -> medium its bytes came from, until re-allocated
  std::vector<TierRow> tiers_;
  std::map<std::uint64_t, TierBlock> tier_blocks_;
  std::int64_t tier_writes_refused_ = 0;
  std::int64_t evictions_ = 0;
  std::int64_t lookups_total_ = 0;
  std::int64_t hit_tokens_total_ = 0;
};

}  // namespace kvscope::ui

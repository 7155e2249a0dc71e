// PrefixTreeFold: folding prefix events into the cached-block tree.
#include "app/core/prefix_tree.h"

#include <algorithm>

namespace kvscope::ui {

void PrefixTreeFold::reset(int num_blocks, int block_size) {
  num_blocks_ = num_blocks;
  block_size_ = block_size;
  nodes_.clear();
  children_.clear();
  lookups_.clear();
  pending_shared_.clear();
  prompt_tokens_.clear();
  tables_.clear();
  reloaded_.clear();
  tiers_.clear();
  tier_blocks_.clear();
  evictions_ = lookups_total_ = hit_tokens_total_ = tier_writes_refused_ = 0;
}

void PrefixTreeFold::apply(const Event& e) {
  if (e.type != EventType::kBlockShared && e.request >= 0) {
    // A request's BlockShared events run right before its PrefixLookup; anything else between
    // (a fork, a copy) ends the run of shares, which then were not lookup hits.
    if (e.type != EventType::kPrefixLookup) pending_shared_.erase(e.request);
  }
  switch (e.type) {
    case EventType::kRequestArrived: {
      const auto p = event_as<ev::RequestArrived>(e);
      prompt_tokens_[p.request] = p.prompt_tokens;
      break;
    }
    case EventType::kBlockAllocated: {
      const auto p = event_as<ev::BlockAllocated>(e);
      map_block(p.request, p.block, p.logical, /*shared=*/false);
      break;
    }
    case EventType::kBlockShared: {
      const auto p = event_as<ev::BlockShared>(e);
      map_block(p.request, p.block, p.logical, /*shared=*/true);
      break;
    }
    case EventType::kBlockCopiedOnWrite: {
      const auto p = event_as<ev::BlockCopiedOnWrite>(e);
      map_block(p.request, p.block, p.logical, /*shared=*/false);
      break;
    }
    case EventType::kBlockFreed: {
      const auto p = event_as<ev::BlockFreed>(e);
      auto it = tables_.find(p.request);
      if (it != tables_.end() && p.logical >= 0 &&
          static_cast<std::size_t>(p.logical) < it->second.size())
        it->second[static_cast<std::size_t>(p.logical)] = -1;
      break;
    }
    case EventType::kTierReloaded:
      on_tier_reloaded(event_as<ev::TierReloaded>(e));
      break;
    case EventType::kTierWritten:
      on_tier_written(event_as<ev::TierWritten>(e), e.step);
      break;
    case EventType::kTierMoved:
      on_tier_moved(event_as<ev::TierMoved>(e), e.step);
      break;
    case EventType::kTierHeld:
      on_tier_held(event_as<ev::TierHeld>(e));
      break;
    case EventType::kBlockCached:
      on_cached(event_as<ev::BlockCached>(e), e.step);
      break;
    case EventType::kCachedBlockEvicted:
      on_evicted(event_as<ev::CachedBlockEvicted>(e).block);
      break;
    case EventType::kPrefixLookup:
      on_lookup(event_as<ev::PrefixLookup>(e), e.step);
      break;
    default:
      break;
  }
}

bool PrefixTreeFold::block_ok(std::int32_t block) const {
  return block >= 0 && block < num_blocks_;
}

void PrefixTreeFold::map_block(std::int32_t request, std::int32_t block, std::int32_t logical,
                               bool shared) {
  if (!block_ok(block) || request < 0 || logical < 0 || logical > (1 << 24)) return;
  std::vector<std::int32_t>& t = tables_[request];
  if (t.size() <= static_cast<std::size_t>(logical))
    t.resize(static_cast<std::size_t>(logical) + 1, -1);
  t[static_cast<std::size_t>(logical)] = block;
  if (shared)
    pending_shared_[request].push_back(block);
  else
    reloaded_.erase(block);  // fresh bytes
}

TierRow& PrefixTreeFold::tier_row(std::int64_t tier) {
  if (tiers_.size() <= static_cast<std::size_t>(tier))
    tiers_.resize(static_cast<std::size_t>(tier) + 1);
  return tiers_[static_cast<std::size_t>(tier)];
}

void PrefixTreeFold::on_tier_reloaded(const ev::TierReloaded& p) {
  if (!block_ok(p.block) || p.tier < 0 || p.tier >= 64) return;
  reloaded_[p.block] = p.medium == TierMedium::kDisk ? 1 : 0;
  ++tier_row(p.tier).reloaded;
  if (const auto row = lookups_.find(p.request); row != lookups_.end())
    row->second.tier_tokens += block_size_;
}

void PrefixTreeFold::on_tier_written(const ev::TierWritten& p, std::int32_t step) {
  if (p.tier < 0) {  // refused: the store no longer holds the block anywhere
    ++tier_writes_refused_;
    tier_blocks_.erase(p.chain_key);
    return;
  }
  ++tier_row(0).written;
  TierBlock t;
  t.since_step = step;
  if (const auto n = nodes_.find(p.block); n != nodes_.end()) {
    t.cached_by = n->second.cached_by;
    t.logical = n->second.logical;
  }
  tier_blocks_[p.chain_key] = t;
}

void PrefixTreeFold::on_tier_moved(const ev::TierMoved& p, std::int32_t step) {
  const auto it = tier_blocks_.find(p.chain_key);
  if (it == tier_blocks_.end()) return;
  if (p.to_tier < 0) {
    tier_blocks_.erase(it);
  } else {
    it->second.tier = static_cast<int>(p.to_tier);
    it->second.since_step = step;
  }
}

void PrefixTreeFold::on_tier_held(const ev::TierHeld& p) {
  if (p.tier < 0 || p.tier >= 64) return;
  TierRow& row = tier_row(p.tier);
  row.held = p.blocks_held;
  row.capacity = p.capacity_blocks;
  row.disk = p.medium == TierMedium::kDisk;
}

void PrefixTreeFold::on_cached(const ev::BlockCached& p, std::int32_t step) {
  if (!block_ok(p.block)) return;
  PrefixNode n;
  n.block = p.block;
  n.logical = std::max(0, p.logical);
  n.cached_by = p.request;
  n.cached_step = step;
  if (p.parent >= 0 && p.parent < num_blocks_) {
    n.parent = static_cast<std::int32_t>(p.parent);
  } else if (p.logical > 0) {  // older recordings: the inserting table's previous block
    auto it = tables_.find(p.request);
    if (it != tables_.end() && static_cast<std::size_t>(p.logical) <= it->second.size())
      n.parent = it->second[static_cast<std::size_t>(p.logical) - 1];
  }
  if (n.parent >= 0 && nodes_.count(n.parent) == 0) n.parent = -1;
  if (const auto r = reloaded_.find(p.block); r != reloaded_.end()) n.reloaded_from = r->second;
  nodes_[p.block] = n;
  if (n.parent >= 0) children_[n.parent].push_back(p.block);
}

void PrefixTreeFold::on_evicted(std::int32_t block) {
  reloaded_.erase(block);
  auto it = nodes_.find(block);
  if (it == nodes_.end()) return;
  ++evictions_;
  if (it->second.parent >= 0) {
    std::vector<std::int32_t>& c = children_[it->second.parent];
    c.erase(std::remove(c.begin(), c.end(), block), c.end());
  }
  children_.erase(block);
  nodes_.erase(it);
}

void PrefixTreeFold::on_lookup(const ev::PrefixLookup& p, std::int32_t step) {
  ++lookups_total_;
  hit_tokens_total_ += p.hit_tokens;
  PrefixLookupRow& row = lookups_[p.request];
  row.request = p.request;
  row.step = step;
  row.hit_tokens = p.hit_tokens;
  row.reason = p.reason;
  row.evicted_step = p.evicted_at_step;
  row.diverged_at = p.diverged_at;
  row.tier_tokens = 0;
  row.prompt_tokens = prompt_tokens_.count(p.request) ? prompt_tokens_[p.request] : 0;
  ++row.lookups;
  for (std::int32_t b : pending_shared_[p.request]) {
    auto it = nodes_.find(b);
    if (it != nodes_.end()) ++it->second.hits;
  }
  pending_shared_.erase(p.request);
}

std::vector<std::int32_t> PrefixTreeFold::roots() const {
  std::vector<std::int32_t> r;
  for (const auto& [id, n] : nodes_)
    if (n.parent < 0) r.push_back(id);
  return r;
}

std::vector<std::int32_t> PrefixTreeFold::children(std::int32_t block) const {
  auto it = children_.find(block);
  if (it == children_.end()) return {};
  std::vector<std::int32_t> c = it->second;
  std::sort(c.begin(), c.end());
  return c;
}

}  // namespace kvscope::ui

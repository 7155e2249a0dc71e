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
  const bool block_ok = e.block >= 0 && e.block < num_blocks_;
  if (e.type != EventType::kBlockShared && e.request >= 0) {
    // A request's BlockShared events run right before its PrefixLookup; anything else between
    // (a fork, a copy) ends the run of shares, which then were not lookup hits.
    if (e.type != EventType::kPrefixLookup) pending_shared_.erase(e.request);
  }
  switch (e.type) {
    case EventType::kRequestArrived:
      prompt_tokens_[e.request] = e.a;
      break;
    case EventType::kBlockAllocated:
    case EventType::kBlockShared:
    case EventType::kBlockCopiedOnWrite: {
      if (!block_ok || e.request < 0 || e.logical < 0 || e.logical > (1 << 24)) break;
      std::vector<std::int32_t>& t = tables_[e.request];
      if (t.size() <= static_cast<std::size_t>(e.logical))
        t.resize(static_cast<std::size_t>(e.logical) + 1, -1);
      t[static_cast<std::size_t>(e.logical)] = e.block;
      if (e.type == EventType::kBlockShared) pending_shared_[e.request].push_back(e.block);
      if (e.type != EventType::kBlockShared) reloaded_.erase(e.block);  // fresh bytes
      break;
    }
    case EventType::kTierReloaded:
      if (!block_ok || e.a < 0 || e.a >= 64) break;
      reloaded_[e.block] = e.b == 1 ? 1 : 0;
      if (tiers_.size() <= static_cast<std::size_t>(e.a))
        tiers_.resize(static_cast<std::size_t>(e.a) + 1);
      ++tiers_[static_cast<std::size_t>(e.a)].reloaded;
      if (const auto row = lookups_.find(e.request); row != lookups_.end())
        row->second.tier_tokens += block_size_;
      break;
    case EventType::kTierWritten: {
      if (e.a < 0) {  // refused: the store no longer holds the block anywhere
        ++tier_writes_refused_;
        tier_blocks_.erase(static_cast<std::uint64_t>(e.b));
        break;
      }
      if (tiers_.empty()) tiers_.resize(1);
      ++tiers_[0].written;
      TierBlock t;
      t.since_step = e.step;
      if (const auto n = nodes_.find(e.block); n != nodes_.end()) {
        t.cached_by = n->second.cached_by;
        t.logical = n->second.logical;
      }
      tier_blocks_[static_cast<std::uint64_t>(e.b)] = t;
      break;
    }
    case EventType::kTierMoved: {
      const auto it = tier_blocks_.find(static_cast<std::uint64_t>(e.b));
      if (it == tier_blocks_.end()) break;
      if (e.a < 0) {
        tier_blocks_.erase(it);
      } else {
        it->second.tier = static_cast<int>(e.a);
        it->second.since_step = e.step;
      }
      break;
    }
    case EventType::kTierHeld:
      if (e.logical < 0 || e.logical >= 64) break;
      if (tiers_.size() <= static_cast<std::size_t>(e.logical))
        tiers_.resize(static_cast<std::size_t>(e.logical) + 1);
      tiers_[static_cast<std::size_t>(e.logical)].held = e.a;
      tiers_[static_cast<std::size_t>(e.logical)].capacity = e.b % kTierMediumUnit;
      tiers_[static_cast<std::size_t>(e.logical)].disk = e.b >= kTierMediumUnit;
      break;
    case EventType::kBlockFreed: {
      auto it = tables_.find(e.request);
      if (it != tables_.end() && e.logical >= 0 &&
          static_cast<std::size_t>(e.logical) < it->second.size())
        it->second[static_cast<std::size_t>(e.logical)] = -1;
      break;
    }
    case EventType::kBlockCached: {
      if (!block_ok) break;
      PrefixNode n;
      n.block = e.block;
      n.logical = std::max(0, e.logical);
      n.cached_by = e.request;
      n.cached_step = e.step;
      if (e.b > 0 && e.b <= num_blocks_) {
        n.parent = static_cast<std::int32_t>(e.b - 1);
      } else if (e.logical > 0) {  // older recordings: the inserting table's previous block
        auto it = tables_.find(e.request);
        if (it != tables_.end() && static_cast<std::size_t>(e.logical) <= it->second.size())
          n.parent = it->second[static_cast<std::size_t>(e.logical) - 1];
      }
      if (n.parent >= 0 && nodes_.count(n.parent) == 0) n.parent = -1;
      if (const auto r = reloaded_.find(e.block); r != reloaded_.end()) n.reloaded_from = r->second;
      nodes_[e.block] = n;
      if (n.parent >= 0) children_[n.parent].push_back(e.block);
      break;
    }
    case EventType::kCachedBlockEvicted: {
      reloaded_.erase(e.block);
      auto it = nodes_.find(e.block);
      if (it == nodes_.end()) break;
      ++evictions_;
      if (it->second.parent >= 0) {
        std::vector<std::int32_t>& c = children_[it->second.parent];
        c.erase(std::remove(c.begin(), c.end(), e.block), c.end());
      }
      children_.erase(e.block);
      nodes_.erase(it);
      break;
    }
    case EventType::kPrefixLookup: {
      ++lookups_total_;
      hit_tokens_total_ += e.a;
      PrefixLookupRow& row = lookups_[e.request];
      row.request = e.request;
      row.step = e.step;
      row.hit_tokens = e.a;
      row.reason = unpack_miss_reason(e.b);
      row.evicted_step = unpack_evicted_step(e.b);
      row.diverged_at = e.logical;
      row.tier_tokens = 0;
      row.prompt_tokens = prompt_tokens_.count(e.request) ? prompt_tokens_[e.request] : 0;
      ++row.lookups;
      for (std::int32_t b : pending_shared_[e.request]) {
        auto it = nodes_.find(b);
        if (it != nodes_.end()) ++it->second.hits;
      }
      pending_shared_.erase(e.request);
      break;
    }
    default:
      break;
  }
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

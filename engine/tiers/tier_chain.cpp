// TierChain: LRU tiers of block keys below the device's prefix cache.
#include "engine/tiers/tier_chain.h"

#include <algorithm>

#include "engine/common/error.h"

namespace kvscope {

void require_prefix_caching_for_tiers(bool has_tiers, bool prefix_caching,
                                      const std::string& where) {
  if (!has_tiers || prefix_caching) return;
  throw Error(where,
              "needs prefix caching (the tiers hold the blocks the prefix cache evicts), got "
              "prefix caching off");
}

TierChain::TierChain(std::vector<TierSpec> tiers) {
  if (tiers.empty()) fail_expected("tiers", "at least one tier", "none");
  for (TierSpec& t : tiers) {
    if (t.capacity_blocks < 0) {
      fail_expected("tiers: " + t.name, "a capacity of 0 or more blocks",
                    std::to_string(t.capacity_blocks));
    }
    tiers_.push_back(Tier{std::move(t), {}, {}});
  }
}

void TierChain::insert_front(int tier, std::uint64_t key, std::vector<TierMove>& moves) {
  Tier& t = tiers_[static_cast<std::size_t>(tier)];
  t.lru.push_front(key);
  where_[key] = Where{tier, t.lru.begin()};
  ++t.stats.written;
  if (static_cast<std::int64_t>(t.lru.size()) > t.spec.capacity_blocks) {
    const std::uint64_t victim = t.lru.back();
    t.lru.pop_back();
    where_.erase(victim);
    ++t.stats.passed_down;
    const bool last = tier + 1 == num_tiers();
    moves.push_back(TierMove{victim, tier, last ? -1 : tier + 1});
    if (!last) insert_front(tier + 1, victim, moves);
  }
  t.stats.peak_held = std::max(t.stats.peak_held, static_cast<std::int64_t>(t.lru.size()));
}

std::vector<TierMove> TierChain::demote(std::uint64_t key) {
  erase(key);
  std::vector<TierMove> moves;
  insert_front(0, key, moves);
  return moves;
}

bool TierChain::erase(std::uint64_t key) {
  const auto it = where_.find(key);
  if (it == where_.end()) return false;
  tiers_[static_cast<std::size_t>(it->second.tier)].lru.erase(it->second.it);
  where_.erase(it);
  return true;
}

std::optional<int> TierChain::locate(std::uint64_t key) const {
  const auto it = where_.find(key);
  if (it == where_.end()) return std::nullopt;
  return it->second.tier;
}

std::optional<int> TierChain::find(std::uint64_t key) {
  const auto it = where_.find(key);
  if (it == where_.end()) return std::nullopt;
  Tier& t = tiers_[static_cast<std::size_t>(it->second.tier)];
  t.lru.splice(t.lru.begin(), t.lru, it->second.it);
  ++t.stats.hits;
  return it->second.tier;
}

void TierChain::check_invariants() const {
  std::size_t total = 0;
  for (int k = 0; k < num_tiers(); ++k) {
    const Tier& t = tiers_[static_cast<std::size_t>(k)];
    if (static_cast<std::int64_t>(t.lru.size()) > t.spec.capacity_blocks) {
      throw InternalError("TierChain", t.spec.name + " holds " + std::to_string(t.lru.size()) +
                                           " blocks, over its capacity of " +
                                           std::to_string(t.spec.capacity_blocks));
    }
    for (auto it = t.lru.begin(); it != t.lru.end(); ++it) {
      const auto w = where_.find(*it);
      if (w == where_.end() || w->second.tier != k || w->second.it != it) {
        throw InternalError("TierChain",
                            "a block in " + t.spec.name + "'s LRU list is not mapped to it");
      }
    }
    total += t.lru.size();
  }
  if (total != where_.size()) {
    throw InternalError("TierChain", std::to_string(where_.size()) + " mapped blocks but " +
                                         std::to_string(total) + " in the tiers' lists");
  }
}

}  // namespace kvscope

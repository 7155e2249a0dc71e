// Which cached, unreferenced block to evict when a slot is needed: LRU (default), LFU or FIFO.
// Only leaves of the prefix tree are candidates (evicting a leaf can expose its parent), and
// pinned blocks never are. Ties break on the block id so the order is deterministic.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>

#include "engine/kv/ids.h"

namespace kvscope {

enum class EvictionPolicyKind : std::uint8_t { kLru, kLfu, kFifo };
std::string_view eviction_policy_name(EvictionPolicyKind kind);  // "lru" / "lfu" / "fifo"
std::optional<EvictionPolicyKind> parse_eviction_policy(std::string_view name);

// What a policy orders by; PrefixCache keeps one per block.
struct EvictionKey {
  std::int64_t last_access = 0;  // logical clock of the last lookup hit or insert
  std::int64_t hits = 0;         // lookups that reused the block
  std::int64_t inserted = 0;     // logical clock when it entered the cache
};

class EvictionCandidates {
 public:
  explicit EvictionCandidates(EvictionPolicyKind kind) : kind_(kind) {}
  EvictionPolicyKind kind() const { return kind_; }
  void add(BlockId block, const EvictionKey& key) { set_.insert(order(block, key)); }
  void remove(BlockId block, const EvictionKey& key) { set_.erase(order(block, key)); }
  bool contains(BlockId block, const EvictionKey& key) const {
    return set_.count(order(block, key)) != 0;
  }
  std::optional<BlockId> victim() const {
    if (set_.empty()) return std::nullopt;
    return BlockId(std::get<2>(*set_.begin()));
  }
  std::size_t size() const { return set_.size(); }
  void clear() { set_.clear(); }

 private:
  using Order = std::tuple<std::int64_t, std::int64_t, std::int32_t>;
  Order order(BlockId block, const EvictionKey& k) const {
    switch (kind_) {
      case EvictionPolicyKind::kLfu:
        return {k.hits, k.last_access, block.value};
      case EvictionPolicyKind::kFifo:
        return {k.inserted, 0, block.value};
      case EvictionPolicyKind::kLru:
        break;
    }
    return {k.last_access, 0, block.value};
  }
  EvictionPolicyKind kind_;
  std::set<Order> set_;
};

}  // namespace kvscope

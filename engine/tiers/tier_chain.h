// The KV tiers below the device's prefix cache, as bookkeeping on block keys: each tier (host RAM,
// then disk, ...) is an LRU set with a capacity in blocks. A block the device evicts enters the
// first tier; a full tier passes its least recently used block down to the next one, and the last
// tier drops it. A block lives in at most one tier. No bytes move here: this is the policy that a
// tier chain with real IO runs, and what `kvscope trace mooncake --tiers` replays at full scale.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace kvscope {

struct TierSpec {
  std::string name;                  // "host", "disk"
  std::int64_t capacity_blocks = 0;  // 0: every block passes straight through to the next tier
};

// The rule "KV tiers need prefix caching": a tier holds the cached blocks the prefix cache evicts
// and finds them again by their chain key, so without prefix caching nothing ever enters one.
// Every configuration with tiers (a scenario's cache, the Simulator's, a Mooncake replay's) checks
// it here, so there is one message; `where` names the tiers as the caller knows them (a JSON path,
// a CLI flag). Throws kvscope::Error when there are tiers and prefix caching is off.
void require_prefix_caching_for_tiers(bool has_tiers, bool prefix_caching,
                                      const std::string& where);

// One block passed down by demote(): from tier `from` to tier `to` (-1: dropped off the last tier).
struct TierMove {
  std::uint64_t key = 0;
  int from = 0;
  int to = -1;
};

struct TierStats {
  std::int64_t written = 0;  // blocks that entered this tier (from the device or the tier above)
  std::int64_t passed_down = 0;  // least recently used blocks moved to the next tier, or dropped
                                 // from the last one
  std::int64_t hits = 0;         // find() calls answered by this tier
  std::int64_t peak_held = 0;
};

class TierChain {
 public:
  // Throws kvscope::Error on no tiers or a negative capacity.
  explicit TierChain(std::vector<TierSpec> tiers);

  // A block the device evicted: it enters the first tier as the most recently used (leaving the
  // tier that held it, if one did), and each tier over its capacity passes its least recently used
  // block down. Returns those pass-downs in the order they happened, the first tier's first (what
  // a store holding the blocks' bytes replays: engine/tiers/kv_tier_store).
  std::vector<TierMove> demote(std::uint64_t key);
  // The tier that holds `key` (0 = the first), which counts a hit and makes it its most recently
  // used block; nullopt when no tier holds it.
  std::optional<int> find(std::uint64_t key);
  // Where `key` is, without counting a hit or refreshing it.
  std::optional<int> locate(std::uint64_t key) const;
  // Forgets `key` wherever it is (a block whose bytes were lost); false when no tier held it.
  bool erase(std::uint64_t key);

  int num_tiers() const { return static_cast<int>(tiers_.size()); }
  const TierSpec& spec(int tier) const { return tiers_.at(static_cast<std::size_t>(tier)).spec; }
  const TierStats& stats(int tier) const { return tiers_.at(static_cast<std::size_t>(tier)).stats; }
  std::int64_t held(int tier) const {
    return static_cast<std::int64_t>(tiers_.at(static_cast<std::size_t>(tier)).lru.size());
  }
  // Throws kvscope::InternalError when a tier is over its capacity or the key map and the LRU
  // lists disagree.
  void check_invariants() const;

 private:
  struct Tier {
    TierSpec spec;
    std::list<std::uint64_t> lru;  // front = most recently used
    TierStats stats;
  };
  struct Where {
    int tier;
    std::list<std::uint64_t>::iterator it;
  };
  void insert_front(int tier, std::uint64_t key, std::vector<TierMove>& moves);

  std::vector<Tier> tiers_;
  std::unordered_map<std::uint64_t, Where> where_;
};

}  // namespace kvscope

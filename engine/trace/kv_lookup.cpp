// KvEventModel::lookup, "why did my prefix miss?": walks the prompt's blocks down the prefix
// chains the stream showed, per (rank, medium, group), by the token ids the stream carried.
//
// A block matches the prompt's block d when its tokens' fingerprint equals that of the prompt's
// tokens [d*B, (d+1)*B), its parent is the block matched at d-1 (none for d = 0) and it is in
// the request's namespace (its LoRA, no extra keys). Where the walk stops, the reason is looked
// for in this order: the same tokens under that parent in another namespace; a block with those
// tokens and parent that the history says left (removed, cleared, restart); a live block with
// the tokens of this or a later prompt block whose chain is not rooted (its parents came before
// attach); never stored.
//
// Media whose stores are placeholders (no token ids: vLLM's offload tiers) are matched by hash:
// the prompt's chain of hashes as far as any medium with tokens on the same rank and group
// showed it (live or removed), then how many of those hashes the medium holds.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "engine/trace/kv_event_model.h"

namespace kvscope {

namespace {

constexpr std::uint64_t kMediumBits = 0xffull << 32;

// The "any medium" scope of a scope's rank and group: the medium bits cleared and bit 63 set, a
// bit no real scope has (ranks end at bit 55), so it never is the GPU's own scope (medium 0).
std::uint64_t any_medium(std::uint64_t scope) {
  return (scope & ~kMediumBits) | (std::uint64_t{1} << 63);
}

// A child of `parent` (or of the root) in a scope with the given tokens.
struct ChildKey {
  std::uint64_t scope, parent, tokens;
  bool root;
  bool operator==(const ChildKey&) const = default;
};
struct ChildKeyHash {
  std::size_t operator()(const ChildKey& k) const {
    std::uint64_t h = k.scope * 0x9E3779B97F4A7C15ull;
    h ^= k.parent + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
    h ^= k.tokens + 0x8CB92BA72F3D8DD7ull + (h << 6) + (h >> 2);
    return static_cast<std::size_t>(h ^ (k.root ? 1 : 0));
  }
};

struct Candidate {
  std::uint64_t hash;
  std::uint64_t extra;
  std::uint16_t lora;
  std::int64_t gone = -1;  // index in the history, -1 for a live block
  std::int32_t slot = -1;  // a live block's slot
};

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

}  // namespace

const char* kv_miss_reason_name(KvMissReason r) {
  switch (r) {
    case KvMissReason::kAllHeld:
      return "all_held";
    case KvMissReason::kShorterThanBlock:
      return "shorter_than_block";
    case KvMissReason::kNeverStored:
      return "never_stored";
    case KvMissReason::kRemoved:
      return "removed";
    case KvMissReason::kOtherNamespace:
      return "other_namespace";
    case KvMissReason::kChainBeforeAttach:
      return "chain_before_attach";
    case KvMissReason::kNoTokens:
      return "no_tokens";
  }
  return "?";
}

std::string kv_lookup_text(const KvLookupRow& row, double last_ts) {
  if (row.reason == KvMissReason::kShorterThanBlock) {
    return "the prompt's " + std::to_string(row.prompt_tokens) + " tokens fill less than one " +
           std::to_string(row.block_size) + "-token block: engines cache full blocks only";
  }
  std::string s = std::to_string(row.matched_blocks) + " of " + std::to_string(row.prompt_blocks) +
                  " blocks held (" + std::to_string(row.matched_tokens) + " of " +
                  std::to_string(row.prompt_tokens) + " tokens)";
  if (row.by_hash) s += ", matched by hash (this medium's stores carry no token ids)";
  const std::string next = "; block " + std::to_string(row.matched_blocks + 1) + " ";
  switch (row.reason) {
    case KvMissReason::kAllHeld: {
      const std::int64_t tail = row.prompt_tokens - row.matched_tokens;
      if (tail > 0) {
        s += "; the last " + std::to_string(tail) +
             " tokens fill less than a block (engines cache full blocks only)";
      }
      break;
    }
    case KvMissReason::kNeverStored:
      s += next + "was never stored since kvscope attached";
      break;
    case KvMissReason::kRemoved:
      s += next + "was stored, then dropped by " + row.removed_by;
      if (row.removed_seq >= 0) s += " in batch " + std::to_string(row.removed_seq);
      if (row.removed_ts > 0 && last_ts >= row.removed_ts)
        s += ", " + seconds_text(last_ts - row.removed_ts) + " before the last batch";
      break;
    case KvMissReason::kOtherNamespace:
      s += next + "is held under " + row.other_namespace + ", not the request's namespace";
      break;
    case KvMissReason::kChainBeforeAttach:
      s += next +
           "is held, but its chain starts in batches kvscope did not see (before attach or "
           "lost), so the match cannot be followed to it";
      break;
    case KvMissReason::kNoTokens:
      s += next + "has no known hash: no medium with token ids showed it";
      break;
    case KvMissReason::kShorterThanBlock:
      break;
  }
  return s;
}

// One lookup's view of the stream: children by (scope, parent, tokens), from live blocks and
// from the history; "any medium" entries (medium bits cleared) serve the placeholder media's
// chain of hashes.
class KvEventModel::Lookup {
 public:
  Lookup(const KvEventModel& m, const KvLookupQuery& q) : m_(m), q_(q) {
    for (std::size_t i = 0; i < m.loras_.size(); ++i)
      if (m.loras_[i] == q.lora) want_lora_ = static_cast<std::int64_t>(i);
    for (const auto& [key, l] : m.live_) {
      add(key.scope, l.has_parent_hash, l.parent_hash, l.tokens,
          {key.hash, l.extra, l.lora, -1, l.slot}, l.block_tokens);
      if (l.tokens != 0 && !l.rooted)
        unrooted_.insert(key.scope ^ (l.tokens * 0x9E3779B97F4A7C15ull));
    }
    for (std::size_t i = 0; i < m.history_.size(); ++i) {
      const Gone& g = m.history_[i];
      add(g.scope, g.has_parent_hash, g.parent_hash, g.tokens,
          {g.hash, g.extra, g.lora, static_cast<std::int64_t>(i)}, g.block_tokens);
      gone_by_hash_[g.hash ^ (g.scope * 0x9E3779B97F4A7C15ull)] = static_cast<std::int64_t>(i);
    }
  }

  // The prompt's row for one (rank, medium, group).
  KvLookupRow row(const std::tuple<int, int, std::int64_t>& rmg) {
    KvLookupRow row;
    row.rank = std::get<0>(rmg);
    row.medium = m_.media_[static_cast<std::size_t>(std::get<1>(rmg))];
    row.group = std::get<2>(rmg);
    row.prompt_tokens = static_cast<std::int64_t>(q_.tokens.size());
    const std::uint64_t sc = scope(row.rank, std::get<1>(rmg), row.group);
    const auto bs_it = block_tokens_.find(sc);
    row.by_hash = bs_it == block_tokens_.end();
    std::int32_t bs = 0;
    if (!row.by_hash) {
      bs = bs_it->second;
    } else if (auto any = block_tokens_.find(any_medium(sc)); any != block_tokens_.end()) {
      bs = any->second;
    }
    row.block_size = row.by_hash ? 0 : bs;
    if (bs <= 0) {  // placeholders only, and no medium with tokens in this group
      row.reason = KvMissReason::kNoTokens;
      return row;
    }
    const std::vector<std::uint64_t>& fps = prompt_chunks(bs);
    row.prompt_blocks = static_cast<std::int64_t>(fps.size());
    if (fps.empty()) {
      row.block_size = bs;
      row.reason = KvMissReason::kShorterThanBlock;
      return row;
    }
    if (row.by_hash) {
      match_by_hash(row, sc, bs, fps);
    } else {
      match_by_tokens(row, sc, fps);
    }
    row.matched_tokens = row.matched_blocks * bs;
    return row;
  }

 private:
  bool in_namespace(const Candidate& c) const { return c.lora == want_lora_ && c.extra == 0; }

  void add(std::uint64_t sc, bool has_parent, std::uint64_t parent, std::uint64_t tokens,
           const Candidate& c, std::int32_t bs) {
    if (tokens == 0) return;
    children_[ChildKey{sc, has_parent ? parent : 0, tokens, !has_parent}].push_back(c);
    children_[ChildKey{any_medium(sc), has_parent ? parent : 0, tokens, !has_parent}].push_back(c);
    block_tokens_.try_emplace(sc, bs);
    block_tokens_.try_emplace(any_medium(sc), bs);
  }

  // The fingerprints of the prompt's full blocks of `bs` tokens.
  const std::vector<std::uint64_t>& prompt_chunks(std::int32_t bs) {
    auto [it, fresh] = chunks_.try_emplace(bs);
    if (fresh && bs > 0) {
      for (std::size_t at = 0; at + static_cast<std::size_t>(bs) <= q_.tokens.size();
           at += static_cast<std::size_t>(bs))
        it->second.push_back(
            kv_token_fingerprint(q_.tokens.data() + at, static_cast<std::size_t>(bs)));
    }
    return it->second;
  }

  const std::vector<Candidate>* find(std::uint64_t sc, std::optional<std::uint64_t> parent,
                                     std::uint64_t tokens) const {
    auto it = children_.find(ChildKey{sc, parent.value_or(0), tokens, !parent});
    return it == children_.end() ? nullptr : &it->second;
  }

  // The prompt's chain of hashes per (rank, group) scope, as far as any medium with tokens
  // showed it (live first, else the latest that left).
  std::vector<std::uint64_t> known_chain(std::uint64_t any_scope, std::int32_t bs) {
    std::vector<std::uint64_t> chain;
    std::optional<std::uint64_t> prev;
    for (std::uint64_t fp : prompt_chunks(bs)) {
      const std::vector<Candidate>* cs = find(any_scope, prev, fp);
      const Candidate* pick = nullptr;
      if (cs != nullptr) {
        for (const Candidate& c : *cs) {
          if (!in_namespace(c)) continue;
          if (pick == nullptr || (pick->gone >= 0 && (c.gone < 0 || c.gone > pick->gone)))
            pick = &c;
        }
      }
      if (pick == nullptr) break;
      chain.push_back(pick->hash);
      prev = pick->hash;
    }
    return chain;
  }

  // The miss is the history's block `i`, which left.
  void set_removed(KvLookupRow& row, std::int64_t i) const {
    const Gone& g = m_.history_[static_cast<std::size_t>(i)];
    row.reason = KvMissReason::kRemoved;
    row.removed_seq = g.seq;
    row.removed_ts = g.ts;
    row.removed_by = g.how == 0 ? "BlockRemoved" : g.how == 1 ? "AllBlocksCleared" : "a restart";
  }

  // A placeholder medium: the known chain of hashes, as far as the medium holds it.
  void match_by_hash(KvLookupRow& row, std::uint64_t sc, std::int32_t bs,
                     const std::vector<std::uint64_t>& fps) {
    const std::vector<std::uint64_t> chain = known_chain(any_medium(sc), bs);
    std::size_t d = 0;
    for (; d < chain.size(); ++d) {
      const auto it = m_.live_.find(Key{chain[d], sc});
      if (it == m_.live_.end()) break;
      row.slots.push_back(it->second.slot);
    }
    row.matched_blocks = static_cast<std::int64_t>(d);
    if (d == fps.size()) {
      row.reason = KvMissReason::kAllHeld;
    } else if (d == chain.size()) {
      row.reason = KvMissReason::kNoTokens;
    } else if (auto g = gone_by_hash_.find(chain[d] ^ (sc * 0x9E3779B97F4A7C15ull));
               g != gone_by_hash_.end()) {
      set_removed(row, g->second);
    } else {
      row.reason = KvMissReason::kNeverStored;
    }
  }

  // A medium with token ids: the prompt's blocks down the live chains of the request's namespace.
  void match_by_tokens(KvLookupRow& row, std::uint64_t sc, const std::vector<std::uint64_t>& fps) {
    std::optional<std::uint64_t> prev;
    std::size_t d = 0;
    for (; d < fps.size(); ++d) {
      const std::vector<Candidate>* cs = find(sc, prev, fps[d]);
      const Candidate* hit = nullptr;
      if (cs != nullptr) {
        for (const Candidate& c : *cs)
          if (c.gone < 0 && in_namespace(c)) hit = &c;
      }
      if (hit == nullptr) break;
      prev = hit->hash;
      row.slots.push_back(hit->slot);
    }
    row.matched_blocks = static_cast<std::int64_t>(d);
    if (d == fps.size()) {
      row.reason = KvMissReason::kAllHeld;
    } else {
      explain_token_miss(row, sc, fps, d, prev);
    }
  }

  // Why the prompt's block d (under `prev`) is not held, in the order the file's comment gives.
  void explain_token_miss(KvLookupRow& row, std::uint64_t sc, const std::vector<std::uint64_t>& fps,
                          std::size_t d, std::optional<std::uint64_t> prev) const {
    const std::vector<Candidate>* cs = find(sc, prev, fps[d]);
    const Candidate* other = nullptr;
    std::int64_t gone = -1;
    if (cs != nullptr) {
      for (const Candidate& c : *cs) {
        if (c.gone < 0 && !in_namespace(c)) other = &c;
        if (c.gone >= 0 && in_namespace(c)) gone = std::max(gone, c.gone);
      }
    }
    if (other != nullptr) {
      row.reason = KvMissReason::kOtherNamespace;
      row.other_namespace = static_cast<std::int64_t>(other->lora) != want_lora_
                                ? "LoRA '" + m_.loras_[other->lora] + "'"
                                : std::string(
                                      "other extra keys (multimodal inputs or a "
                                      "cache salt)");
    } else if (gone >= 0) {
      set_removed(row, gone);
    } else if (std::any_of(fps.begin() + static_cast<std::ptrdiff_t>(d), fps.end(),
                           [&](std::uint64_t fp) {
                             return unrooted_.count(sc ^ (fp * 0x9E3779B97F4A7C15ull)) != 0;
                           })) {
      row.reason = KvMissReason::kChainBeforeAttach;  // a later block is held, unrooted
    } else {
      row.reason = KvMissReason::kNeverStored;
    }
  }

  const KvEventModel& m_;
  const KvLookupQuery& q_;
  std::int64_t want_lora_ = -1;  // -1: an adapter the stream never named, nothing is in it
  std::unordered_map<ChildKey, std::vector<Candidate>, ChildKeyHash> children_;
  std::unordered_map<std::uint64_t, std::int32_t> block_tokens_;  // scope -> tokens per block
  std::unordered_set<std::uint64_t> unrooted_;  // scope ^ mixed tokens of unrooted live blocks
  std::unordered_map<std::uint64_t, std::int64_t> gone_by_hash_;  // hash ^ scope mix -> index
  std::unordered_map<std::int32_t, std::vector<std::uint64_t>> chunks_;  // block size -> prints
};

std::vector<KvLookupRow> KvEventModel::lookup(const KvLookupQuery& q) const {
  Lookup look(*this, q);
  std::vector<KvLookupRow> rows;
  for (const auto& [rmg, n] : live_rmg_) {
    (void)n;
    rows.push_back(look.row(rmg));
  }
  std::sort(rows.begin(), rows.end(), [](const KvLookupRow& a, const KvLookupRow& b) {
    return std::tie(a.rank, a.medium, a.group) < std::tie(b.rank, b.medium, b.group);
  });
  return rows;
}

}  // namespace kvscope

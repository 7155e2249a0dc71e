// PrefixCache implementation: lookup/acquire, allocate-with-eviction, insert with dedup,
// release, fork and copy-on-write, pinning, invariants.
#include "engine/prefix/prefix_cache.h"

#include <string>

#include "engine/common/error.h"

namespace kvscope {

PrefixCache::PrefixCache(BlockPool& pool, const PrefixCacheConfig& config, EventSink* sink)
    : pool_(pool),
      config_(config),
      sink_(sink),
      index_(make_prefix_index(config.index, config.block_size, config.hash)),
      meta_(static_cast<std::size_t>(pool.num_blocks())),
      candidates_(config.policy) {}

void PrefixCache::unlist(BlockId b) {
  const BlockMeta& m = meta_[idx(b)];
  if (m.cached && !m.pinned && m.seq_refs == 0) --num_evictable_;
  if (is_candidate(m)) candidates_.remove(b, m.key);
}

void PrefixCache::relist(BlockId b) {
  const BlockMeta& m = meta_[idx(b)];
  if (m.cached && !m.pinned && m.seq_refs == 0) ++num_evictable_;
  if (is_candidate(m)) candidates_.add(b, m.key);
}

void PrefixCache::add_seq_ref(std::int32_t request, BlockId b, int logical, bool emit_shared) {
  BlockMeta& m = meta_[idx(b)];
  unlist(b);
  pool_.add_ref(b);  // throws (state untouched but unlisted) only on a free block: a caller bug
  if (m.seq_refs >= 1) {
    ++metrics_.blocks_saved;
    metrics_.peak_blocks_saved = std::max(metrics_.peak_blocks_saved, metrics_.blocks_saved);
  }
  ++m.seq_refs;
  relist(b);
  if (emit_shared) emit(ev::BlockShared{request, b.value, logical, pool_.ref_count(b)});
}

void PrefixCache::drop_seq_ref(BlockId b) {
  BlockMeta& m = meta_[idx(b)];
  if (m.seq_refs <= 0) {
    throw Error("prefix cache",
                "release of block " + std::to_string(b.value) + ", which no sequence holds");
  }
  unlist(b);
  if (m.seq_refs >= 2) --metrics_.blocks_saved;
  --m.seq_refs;
  pool_.release(b);
  relist(b);
}

PrefixLookupResult PrefixCache::lookup_and_acquire(std::int32_t request,
                                                   std::span<const TokenId> prompt, bool record) {
  const auto n = static_cast<std::int64_t>(prompt.size());
  const int bs = config_.block_size;
  ++clock_;
  PrefixLookupResult r;
  std::int64_t collisions = 0;
  const int max_blocks = n > 0 ? static_cast<int>((n - 1) / bs) : 0;
  if (!config_.enabled) {
    r.reason = MissReason::kDisabled;
  } else if (max_blocks == 0) {
    r.reason = MissReason::kShorterThanBlock;
  } else {
    IndexMatch m = index_->match(prompt, max_blocks);
    collisions = m.collisions;
    for (std::size_t i = 0; i < m.blocks.size(); ++i) {
      const BlockId b = m.blocks[i];
      unlist(b);
      meta_[idx(b)].key.last_access = clock_;
      ++meta_[idx(b)].key.hits;
      relist(b);
      add_seq_ref(request, b, static_cast<int>(i), true);
    }
    r.blocks = std::move(m.blocks);
    const auto hit = static_cast<int>(r.blocks.size());
    if (hit < max_blocks) {
      // The chain key of the first missing block tells whether it was cached and evicted.
      const std::uint64_t parent = hit == 0 ? kRootKey : meta_[idx(r.blocks.back())].chain_key;
      const std::uint64_t key = strong_block_hash(
          parent, prompt.subspan(static_cast<std::size_t>(hit) * static_cast<std::size_t>(bs),
                                 static_cast<std::size_t>(bs)));
      if (auto it = evicted_at_.find(key); it != evicted_at_.end()) {
        r.reason = MissReason::kEvicted;
        r.evicted_at_step = it->second;
      } else if (m.matched_tokens > 0) {
        r.reason = MissReason::kDiverged;
        r.diverged_at = m.matched_tokens;
      } else {
        r.reason = MissReason::kFirstOccurrence;
      }
    }
  }
  r.hit_tokens = static_cast<std::int64_t>(r.blocks.size()) * bs;
  if (!record) return r;  // a reservation: the references are taken, the lookup not counted
  ++metrics_.lookups;
  metrics_.prompt_tokens += n;
  metrics_.prompt_blocks += n / bs;
  metrics_.collisions += collisions;
  metrics_.hit_tokens += r.hit_tokens;
  metrics_.hit_blocks += static_cast<std::int64_t>(r.blocks.size());
  ++metrics_.lookups_by_reason[static_cast<std::size_t>(r.reason)];
  emit(ev::PrefixLookup{request, static_cast<std::int32_t>(r.diverged_at), r.hit_tokens, r.reason,
                        r.evicted_at_step});
  return r;
}

PrefixProbe PrefixCache::probe(std::span<const TokenId> prompt) const {
  PrefixProbe p;
  const auto n = static_cast<std::int64_t>(prompt.size());
  const int max_blocks = n > 0 ? static_cast<int>((n - 1) / config_.block_size) : 0;
  if (!config_.enabled || max_blocks == 0) return p;
  for (BlockId b : index_->match(prompt, max_blocks).blocks) {
    ++p.hit_blocks;
    const BlockMeta& m = meta_[idx(b)];
    if (m.cached && !m.pinned && m.seq_refs == 0) ++p.evictable_hits;
  }
  return p;
}

void PrefixCache::evict(BlockId b) {
  BlockMeta& m = meta_[idx(b)];
  if (evict_observer_) evict_observer_(b, m.chain_key);
  unlist(b);
  const std::optional<BlockId> parent = index_->parent_of(b);
  index_->erase(b);
  evicted_at_[m.chain_key] = step_;
  ++metrics_.evictions;
  emit(ev::CachedBlockEvicted{b.value, m.cached_by});
  m = BlockMeta{};
  pool_.release(b);  // the cache's reference: the block joins the free queue
  if (parent) {
    unlist(*parent);
    --meta_[idx(*parent)].cached_children;
    relist(*parent);
  }
}

std::optional<BlockId> PrefixCache::allocate() {
  if (pool_.num_free() == 0) {
    const std::optional<BlockId> victim = candidates_.victim();
    if (!victim) return std::nullopt;
    evict(*victim);
  }
  const std::optional<BlockId> b = pool_.allocate();
  if (b) {
    meta_[idx(*b)] = BlockMeta{};
    meta_[idx(*b)].seq_refs = 1;
  }
  return b;
}

void PrefixCache::insert(std::int32_t request, std::span<const TokenId> tokens,
                         std::span<BlockId> table) {
  if (!config_.enabled) return;
  const auto bs = static_cast<std::size_t>(config_.block_size);
  const std::size_t n = std::min(table.size(), tokens.size() / bs);
  for (std::size_t i = 0; i < n; ++i) {
    if (meta_[idx(table[i])].seq_refs <= 0) {
      throw Error("prefix cache", "insert: block " + std::to_string(table[i].value) + " (logical " +
                                      std::to_string(i) + ") is not held by a sequence");
    }
  }
  ++clock_;
  const std::vector<IndexedBlock> res = index_->insert(tokens.first(n * bs), table.first(n));
  std::uint64_t key = kRootKey;
  for (std::size_t i = 0; i < res.size(); ++i) {
    const IndexedBlock& ib = res[i];
    const BlockId b = ib.block;
    if (ib.added) {
      key = strong_block_hash(key, tokens.subspan(i * bs, bs));
      unlist(b);
      BlockMeta& m = meta_[idx(b)];
      m.cached = true;
      m.chain_key = key;
      m.cached_by = request;
      m.key = EvictionKey{clock_, 0, clock_};
      pool_.add_ref(b);  // the cache's own reference
      relist(b);
      ++metrics_.inserted_blocks;
      emit(ev::BlockCached{request, b.value, static_cast<std::int32_t>(i), pool_.ref_count(b),
                           ib.parent ? ib.parent->value : -1});
      if (ib.parent) {
        unlist(*ib.parent);
        ++meta_[idx(*ib.parent)].cached_children;
        relist(*ib.parent);
      }
      continue;
    }
    key = meta_[idx(b)].chain_key;
    unlist(b);
    meta_[idx(b)].key.last_access = clock_;
    relist(b);
    if (b != table[i]) {  // computed twice: share the cached copy, free the duplicate
      add_seq_ref(request, b, static_cast<int>(i), true);
      drop_seq_ref(table[i]);
      table[i] = b;
      ++metrics_.deduplicated_blocks;
    }
  }
}

void PrefixCache::release(std::span<const BlockId> table) {
  for (BlockId b : table) drop_seq_ref(b);
}

void PrefixCache::fork(std::int32_t child, std::span<const BlockId> table) {
  for (std::size_t i = 0; i < table.size(); ++i)
    add_seq_ref(child, table[i], static_cast<int>(i), true);
}

WriteAccess PrefixCache::prepare_write(std::int32_t request, std::span<BlockId> table,
                                       int logical) {
  WriteAccess w;
  if (logical < 0 || static_cast<std::size_t>(logical) >= table.size()) {
    fail_expected("prefix cache: prepare_write logical",
                  "an index below " + std::to_string(table.size()), std::to_string(logical));
  }
  const BlockId src = table[static_cast<std::size_t>(logical)];
  const BlockMeta& m = meta_[idx(src)];
  if (m.seq_refs <= 1 && !m.cached) return w;  // sole owner of an uncached block: write in place
  const std::optional<BlockId> dst = allocate();
  if (!dst) {
    w.out_of_blocks = true;
    return w;
  }
  table[static_cast<std::size_t>(logical)] = *dst;
  drop_seq_ref(src);
  w.needs_copy = true;
  w.src = src;
  w.dst = *dst;
  emit(ev::BlockCopiedOnWrite{request, dst->value, logical, src.value});
  return w;
}

int PrefixCache::set_pinned(std::span<const TokenId> prefix, bool pinned) {
  const int whole = static_cast<int>(prefix.size() / static_cast<std::size_t>(config_.block_size));
  int changed = 0;
  for (BlockId b : index_->match(prefix, whole).blocks) {
    if (meta_[idx(b)].pinned == pinned) continue;
    unlist(b);
    meta_[idx(b)].pinned = pinned;
    relist(b);
    ++changed;
    if (pinned) emit(ev::BlockPinned{b.value});
  }
  return changed;
}

int PrefixCache::pin(std::span<const TokenId> prefix) {
  return set_pinned(prefix, true);
}
int PrefixCache::unpin(std::span<const TokenId> prefix) {
  return set_pinned(prefix, false);
}

void PrefixCache::check_invariants() const {
  const std::string where = "prefix cache invariant";
  pool_.check_invariants();
  index_->check_invariants();
  std::vector<std::int32_t> children(meta_.size(), 0);
  for (BlockId b : index_->blocks()) {
    if (auto p = index_->parent_of(b)) {
      if (!index_->contains(*p))
        throw InternalError(where, "cached block " + std::to_string(b.value) + " is unreachable");
      ++children[idx(*p)];
    }
  }
  int evictable = 0;
  std::size_t listed = 0;
  std::int64_t saved = 0;
  for (std::size_t i = 0; i < meta_.size(); ++i) {
    const BlockMeta& m = meta_[i];
    const BlockId b(static_cast<std::int32_t>(i));
    const std::string nm = "block " + std::to_string(i);
    if (m.seq_refs < 0) throw InternalError(where, nm + " has a negative sequence ref count");
    if (pool_.ref_count(b) != m.seq_refs + (m.cached ? 1 : 0)) {
      throw InternalError(where, nm + ": pool ref count " + std::to_string(pool_.ref_count(b)) +
                                     " != " + std::to_string(m.seq_refs) + " sequences + " +
                                     (m.cached ? "1" : "0") + " cache");
    }
    if (m.cached != index_->contains(b))
      throw InternalError(where, nm + ": cached flag disagrees with the index");
    if (m.pinned && !m.cached) throw InternalError(where, nm + " is pinned but not cached");
    if (m.cached_children != children[i])
      throw InternalError(where, nm + " has a wrong cached-children count");
    if (is_candidate(m) != candidates_.contains(b, m.key))
      throw InternalError(where, nm + ": eviction candidate list is stale");
    if (is_candidate(m)) ++listed;
    if (m.cached && !m.pinned && m.seq_refs == 0) ++evictable;
    saved += std::max(0, m.seq_refs - 1);
  }
  if (listed != candidates_.size())
    throw InternalError(where, "eviction candidate list holds extra blocks");
  if (evictable != num_evictable_) throw InternalError(where, "evictable count is stale");
  if (saved != metrics_.blocks_saved) throw InternalError(where, "blocks_saved is stale");
}

}  // namespace kvscope

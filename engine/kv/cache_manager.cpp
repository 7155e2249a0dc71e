// KvCacheManager: paged and contiguous allocation over one pool.
#include "engine/kv/cache_manager.h"

#include <algorithm>
#include <string>

#include "engine/common/error.h"

namespace kvscope {

KvCacheManager::KvCacheManager(const KvLayout& layout, AllocatorKind kind, int max_seq_len,
                               bool with_storage)
    : layout_(layout), kind_(kind), max_seq_len_(max_seq_len), pool_(layout.num_blocks) {
  if (with_storage) storage_ = std::make_unique<KvStorage>(layout_);
}

void require_paged_for_prefix_caching(bool prefix_caching, AllocatorKind allocator,
                                      const std::string& where) {
  if (!prefix_caching || allocator == AllocatorKind::kPaged) return;
  throw Error(where,
              "prefix caching needs the paged allocator (contiguous regions are private to one "
              "sequence and cannot be shared), got the contiguous allocator");
}

void KvCacheManager::set_block_source(BlockSource* source) {
  require_paged_for_prefix_caching(source != nullptr, kind_, "kv cache");
  if (!tables_.empty()) throw Error("kv cache", "set_block_source: sequences already exist");
  source_ = source;
}

void KvCacheManager::add_sequence_with_prefix(SeqId id, std::vector<BlockId> blocks, int tokens) {
  if (has_sequence(id))
    throw Error("kv cache", "sequence " + std::to_string(id.value) + " already exists");
  if (kind_ != AllocatorKind::kPaged)
    throw Error("kv cache", "add_sequence_with_prefix: paged only");
  if (tokens < 0 || blocks_for(tokens) != static_cast<int>(blocks.size())) {
    throw Error("kv cache", "add_sequence_with_prefix: " + std::to_string(blocks.size()) +
                                " blocks cannot hold exactly " + std::to_string(tokens) +
                                " tokens");
  }
  BlockTable table;
  table.blocks = std::move(blocks);
  table.num_tokens = tokens;
  const auto n = static_cast<std::int64_t>(table.blocks.size());
  tables_.emplace(id, std::move(table));
  order_.push_back(id);
  if (n > 0) emit(ev::BlockTableUpdated{id.value, n, tokens});
}

void KvCacheManager::fork_sequence(SeqId parent, SeqId child) {
  if (source_ == nullptr) throw Error("kv cache", "fork_sequence needs a block source");
  if (has_sequence(child))
    throw Error("kv cache", "sequence " + std::to_string(child.value) + " already exists");
  BlockTable t = table(parent);
  source_->fork(child.value, t.blocks);
  const auto n = static_cast<std::int64_t>(t.blocks.size());
  const int tokens = t.num_tokens;
  tables_.emplace(child, std::move(t));
  order_.push_back(child);
  emit(ev::BlockTableUpdated{child.value, n, tokens});
}

bool KvCacheManager::shared_tail(const BlockTable& t) const {
  if (source_ == nullptr || t.num_tokens % layout_.block_size == 0) return false;
  return pool_.ref_count(t.blocks.back()) > 1;
}

bool KvCacheManager::prepare_write(SeqId id, int slot) {
  if (source_ == nullptr) return true;
  BlockTable& t = tables_.at(id);
  const int logical = slot / layout_.block_size;
  const WriteAccess w = source_->prepare_write(id.value, t.blocks, logical);
  if (w.out_of_blocks) return false;
  if (w.needs_copy && storage_) storage_->copy_block(w.src, w.dst);
  return true;
}

void KvCacheManager::replace_block(SeqId id, int logical, BlockId block) {
  BlockTable& t = tables_.at(id);
  BlockId& slot = t.blocks.at(static_cast<std::size_t>(logical));
  if (slot == block) return;
  const BlockId old = slot;
  slot = block;
  emit(ev::BlockFreed{id.value, old.value, logical});
}

int KvCacheManager::blocks_to_admit(int tokens) const {
  if (kind_ == AllocatorKind::kContiguous) return blocks_for(max_seq_len_);
  int blocks = blocks_for(tokens);
  for (const ExtraGroup& g : extra_)  // a new sequence's first chunk: nothing to free yet
    blocks += group_entries(g.spec, tokens);
  return blocks;
}

bool KvCacheManager::add_sequence(SeqId id) {
  if (has_sequence(id))
    throw Error("kv cache", "sequence " + std::to_string(id.value) + " already exists");
  BlockTable table;
  if (kind_ == AllocatorKind::kContiguous) {
    const int n = blocks_for(max_seq_len_);
    auto first = pool_.allocate_run(n);
    if (!first) return false;
    table.reserved_blocks = n;
    for (int i = 0; i < n; ++i) {
      table.blocks.emplace_back(first->value + i);
      emit(ev::BlockAllocated{id.value, table.blocks.back().value, i});
    }
  }
  tables_.emplace(id, std::move(table));
  order_.push_back(id);
  return true;
}

int KvCacheManager::own_blocks_needed(const BlockTable& t, int n) const {
  return std::max(0, blocks_for(t.num_tokens + n) - static_cast<int>(t.blocks.size())) +
         (n > 0 && shared_tail(t) ? 1 : 0);  // copy-on-write of the shared partial block
}

// vLLM's sliding window keeps the tokens from num_computed - window + 1 on: the blocks wholly
// before that go back to the pool.
static int skipped_blocks(const KvGroup& g, int num_tokens, int block_size) {
  if (g.kind != LayerKind::kSliding) return 0;
  return std::max(0, num_tokens - g.window + 1) / block_size;
}

int KvCacheManager::group_entries(const KvGroup& g, int tokens) const {
  return g.kind == LayerKind::kState ? (tokens > 0 ? 1 : 0) : blocks_for(tokens);
}

int KvCacheManager::extra_blocks_needed(SeqId id, const BlockTable& t, int n, int* frees) const {
  int need = 0;
  *frees = 0;
  for (const ExtraGroup& g : extra_) {
    const auto it = g.tables.find(id);
    const std::vector<BlockId> none;
    const std::vector<BlockId>& blocks = it != g.tables.end() ? it->second : none;
    const int have = static_cast<int>(blocks.size());
    need += std::max(0, group_entries(g.spec, t.num_tokens + n) - have);
    const int skip = std::min(have, skipped_blocks(g.spec, t.num_tokens, layout_.block_size));
    for (int i = 0; i < skip; ++i) *frees += blocks[static_cast<std::size_t>(i)].value >= 0 ? 1 : 0;
  }
  return need;
}

int KvCacheManager::blocks_needed(SeqId id, int n) const {
  const BlockTable& t = table(id);
  if (kind_ == AllocatorKind::kContiguous) return 0;
  int frees = 0;
  const int extra = extra_.empty() ? 0 : extra_blocks_needed(id, t, n, &frees);
  return std::max(0, own_blocks_needed(t, n) + extra - frees);
}

int KvCacheManager::blocks_to_hold(int tokens) const {
  int blocks = blocks_for(tokens);
  for (const ExtraGroup& g : extra_) {
    const int entries = group_entries(g.spec, tokens);
    // A window holds at most the blocks of its window and the one it straddles into.
    blocks += g.spec.kind == LayerKind::kSliding ? std::min(entries, blocks_for(g.spec.window) + 1)
                                                 : entries;
  }
  return blocks;
}

void KvCacheManager::set_layer_groups(const std::vector<KvGroup>& groups) {
  if (groups.empty() || groups.front().kind != LayerKind::kFull)
    throw InternalError("kv cache", "layer groups must start with a full-attention group");
  if (!tables_.empty())
    throw InternalError("kv cache", "layer groups are set before the first sequence");
  if (kind_ != AllocatorKind::kPaged || source_ != nullptr || storage_ != nullptr) {
    throw Error("cache.layer_groups",
                "hybrid layer groups run on the paged allocator without prefix caching, "
                "bookkeeping only (no K/V bytes)");
  }
  first_group_ = groups.front();
  extra_.clear();
  for (std::size_t g = 1; g < groups.size(); ++g) extra_.push_back(ExtraGroup{groups[g], {}});
}

long KvCacheManager::group_blocks(int g) const {
  long n = 0;
  if (g == 0) {
    for (const auto& [id, t] : tables_) n += static_cast<long>(t.blocks.size());
    return n;
  }
  for (const auto& [id, blocks] : extra_.at(static_cast<std::size_t>(g - 1)).tables)
    for (BlockId b : blocks) n += b.value >= 0 ? 1 : 0;
  return n;
}

std::vector<int> KvCacheManager::group_table(int g, SeqId id) const {
  std::vector<int> out;
  const ExtraGroup& e = extra_.at(static_cast<std::size_t>(g - 1));
  const auto it = e.tables.find(id);
  if (it != e.tables.end())
    for (BlockId b : it->second) out.push_back(b.value);
  return out;
}

void KvCacheManager::require_add_sequence(SeqId id) {
  if (!add_sequence(id)) {
    throw InternalError("KvCacheManager", "sequence " + std::to_string(id.value) +
                                              " did not fit in a pool its caller sized for it");
  }
}

void KvCacheManager::require_append_slots(SeqId id, int n) {
  if (!append_slots(id, n)) {
    throw InternalError("KvCacheManager", "sequence " + std::to_string(id.value) +
                                              " could not grow by " + std::to_string(n) +
                                              " slots in a pool its caller sized for it");
  }
}

bool KvCacheManager::append_slots(SeqId id, int n) {
  BlockTable& t = tables_.at(id);
  if (kind_ == AllocatorKind::kContiguous) {
    if (t.num_tokens + n > max_seq_len_) return false;
    t.num_tokens += n;
    return true;
  }
  int need = own_blocks_needed(t, n);
  if (!extra_.empty()) {
    int frees = 0;
    const int extra = extra_blocks_needed(id, t, n, &frees);
    if (need + extra - frees > num_allocatable()) return false;
    // First the windows' blocks that fell out of them, then every group's new ones (vLLM's
    // order: remove_skipped_blocks before allocating).
    for (ExtraGroup& g : extra_) {
      std::vector<BlockId>& blocks = g.tables[id];
      const int skip = std::min(static_cast<int>(blocks.size()),
                                skipped_blocks(g.spec, t.num_tokens, layout_.block_size));
      for (int i = 0; i < skip; ++i) {
        if (blocks[static_cast<std::size_t>(i)].value < 0) continue;
        pool_.release(blocks[static_cast<std::size_t>(i)]);
        emit(ev::BlockFreed{id.value, blocks[static_cast<std::size_t>(i)].value, -1});
        blocks[static_cast<std::size_t>(i)] = BlockId(-1);
      }
      const int want = group_entries(g.spec, t.num_tokens + n);
      while (static_cast<int>(blocks.size()) < want) {
        std::optional<BlockId> got = pool_.allocate();
        if (!got) throw InternalError("kv cache", "the pool ran dry below its free count");
        blocks.push_back(*got);
        emit(ev::BlockAllocated{id.value, got->value, -1});
        emit(ev::BlockGrouped{id.value, got->value, static_cast<int>(&g - extra_.data()) + 1,
                              static_cast<int>(g.spec.kind), g.spec.window});
      }
    }
  } else if (need > num_allocatable()) {
    return false;
  }
  if (n > 0 && shared_tail(t)) {  // the next slot is in a partial block others share: copy it
    if (!prepare_write(id, t.num_tokens)) return false;
    --need;
  }
  for (int i = 0; i < need; ++i) {
    std::optional<BlockId> got = source_ ? source_->allocate() : pool_.allocate();
    if (!got) throw Error("kv cache", "internal: the block source ran dry below num_allocatable");
    BlockId b = *got;
    t.blocks.push_back(b);
    emit(ev::BlockAllocated{id.value, b.value, static_cast<int>(t.blocks.size()) - 1});
  }
  t.num_tokens += n;
  if (need > 0) {
    emit(ev::BlockTableUpdated{id.value, static_cast<std::int64_t>(t.blocks.size()), t.num_tokens});
  }
  return true;
}

void KvCacheManager::free_sequence(SeqId id) {
  auto it = tables_.find(id);
  if (it == tables_.end()) return;
  const auto& blocks = it->second.blocks;
  if (source_) source_->release(blocks);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (!source_) pool_.release(blocks[i]);
    // KIVI staging (open groups) belongs to the sequence: drop it once nobody holds the block.
    if (storage_ && pool_.is_free(blocks[i])) storage_->drop_block_staging(blocks[i]);
    emit(ev::BlockFreed{id.value, blocks[i].value, static_cast<int>(i)});
  }
  tables_.erase(it);
  order_.erase(std::find(order_.begin(), order_.end(), id));
  for (ExtraGroup& g : extra_) {
    const auto e = g.tables.find(id);
    if (e == g.tables.end()) continue;
    for (BlockId b : e->second) {
      if (b.value < 0) continue;
      pool_.release(b);
      emit(ev::BlockFreed{id.value, b.value, -1});
    }
    g.tables.erase(e);
  }
}

const BlockTable& KvCacheManager::table(SeqId id) const {
  auto it = tables_.find(id);
  if (it == tables_.end()) throw Error("kv cache", "no sequence " + std::to_string(id.value));
  return it->second;
}

KvSeqView KvCacheManager::view(SeqId id) {
  const BlockTable& t = table(id);
  if (!storage_) throw Error("kv cache", "this cache has no K/V storage (bookkeeping only)");
  KvSeqView v;
  v.storage = storage_.get();
  v.blocks = t.blocks;
  v.num_slots = t.num_tokens;
  v.contiguous = kind_ == AllocatorKind::kContiguous;
  return v;
}

std::vector<SeqId> KvCacheManager::sequences() const {
  return order_;
}

long KvCacheManager::allocated_slots() const {
  long slots = 0;
  for (const auto& [id, t] : tables_)
    slots += static_cast<long>(t.blocks.size()) * layout_.block_size;
  return slots;  // the first group's (a hybrid's other groups: group_blocks)
}

long KvCacheManager::filled_slots() const {
  long filled = 0;
  for (const auto& [id, t] : tables_) filled += t.num_tokens;
  return filled;
}

void KvCacheManager::check_invariants() const {
  pool_.check_invariants();
  std::vector<int> owners(static_cast<std::size_t>(pool_.num_blocks()), 0);
  for (const auto& [id, t] : tables_) {
    const std::string who = "sequence " + std::to_string(id.value);
    if (t.num_tokens < 0)
      throw InternalError("kv cache invariant", who + " has a negative token count");
    if (kind_ == AllocatorKind::kPaged &&
        static_cast<int>(t.blocks.size()) != blocks_for(t.num_tokens)) {
      throw InternalError("kv cache invariant", who + " holds " + std::to_string(t.blocks.size()) +
                                                    " blocks for " + std::to_string(t.num_tokens) +
                                                    " tokens");
    }
    if (kind_ == AllocatorKind::kContiguous) {
      if (static_cast<int>(t.blocks.size()) != t.reserved_blocks || t.num_tokens > max_seq_len_) {
        throw InternalError("kv cache invariant", who + " reservation does not match its table");
      }
      for (std::size_t i = 1; i < t.blocks.size(); ++i) {
        if (t.blocks[i].value != t.blocks[i - 1].value + 1) {
          throw InternalError("kv cache invariant", who + " contiguous region is not consecutive");
        }
      }
    }
    for (BlockId b : t.blocks) {
      if (b.value < 0 || b.value >= pool_.num_blocks()) {
        throw InternalError("kv cache invariant",
                            who + " maps to bad block " + std::to_string(b.value));
      }
      ++owners[static_cast<std::size_t>(b.value)];
    }
    for (std::size_t g = 0; g < extra_.size(); ++g) {
      const KvGroup& spec = extra_[g].spec;
      const auto e = extra_[g].tables.find(id);
      const int have = e == extra_[g].tables.end() ? 0 : static_cast<int>(e->second.size());
      const int want = group_entries(spec, t.num_tokens);
      const std::string in =
          who + "'s group " + std::to_string(g + 1) + " (" + layer_kind_name(spec.kind) + ")";
      if (have != want) {
        throw InternalError("kv cache invariant", in + " holds " + std::to_string(have) +
                                                      " table entries for " +
                                                      std::to_string(t.num_tokens) + " tokens");
      }
      for (int i = 0; i < have; ++i) {
        const int b = e->second[static_cast<std::size_t>(i)].value;
        // A window's released entries are its first ones, and only those wholly behind it.
        if (b < 0 && i >= skipped_blocks(spec, t.num_tokens, layout_.block_size))
          throw InternalError("kv cache invariant", in + " released block " + std::to_string(i) +
                                                        ", which its window still covers");
        if (b < 0) continue;
        if (b >= pool_.num_blocks())
          throw InternalError("kv cache invariant", in + " maps to bad block " + std::to_string(b));
        ++owners[static_cast<std::size_t>(b)];
      }
    }
  }
  for (int b = 0; b < pool_.num_blocks(); ++b) {
    const int rc = pool_.ref_count(BlockId(b));
    const int cached = source_ && source_->is_cached(BlockId(b)) ? 1 : 0;
    if (owners[static_cast<std::size_t>(b)] + cached != rc) {
      throw InternalError("kv cache invariant",
                          "block " + std::to_string(b) + " has ref count " + std::to_string(rc) +
                              " but " + std::to_string(owners[static_cast<std::size_t>(b)]) +
                              " owners" + (cached ? " + the cache" : ""));
    }
    if (!source_ && rc > 1) {
      throw InternalError("kv cache invariant", "block " + std::to_string(b) + " is held by " +
                                                    std::to_string(rc) +
                                                    " sequences without sharing");
    }
  }
}

}  // namespace kvscope

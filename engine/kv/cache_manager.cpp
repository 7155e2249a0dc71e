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

int KvCacheManager::blocks_to_admit(int tokens) const {
  return kind_ == AllocatorKind::kContiguous ? blocks_for(max_seq_len_) : blocks_for(tokens);
}

void KvCacheManager::emit(EventType type, SeqId seq, BlockId block, int logical, std::int64_t a,
                          std::int64_t b) {
  if (sink_ == nullptr) return;
  Event e;
  e.type = type;
  e.step = step_ != nullptr ? *step_ : 0;
  e.request = seq.value;
  e.block = block.value;
  e.logical = logical;
  e.a = a;
  e.b = b;
  sink_->emit(e);
}

bool KvCacheManager::add_sequence(SeqId id) {
  if (has_sequence(id)) throw Error("kv cache", "sequence " + std::to_string(id.value) + " already exists");
  BlockTable table;
  if (kind_ == AllocatorKind::kContiguous) {
    const int n = blocks_for(max_seq_len_);
    auto first = pool_.allocate_run(n);
    if (!first) return false;
    table.reserved_blocks = n;
    for (int i = 0; i < n; ++i) {
      table.blocks.emplace_back(first->value + i);
      emit(EventType::kBlockAllocated, id, table.blocks.back(), i);
    }
  }
  tables_.emplace(id, std::move(table));
  order_.push_back(id);
  return true;
}

int KvCacheManager::blocks_needed(SeqId id, int n) const {
  const BlockTable& t = table(id);
  if (kind_ == AllocatorKind::kContiguous) return 0;
  return std::max(0, blocks_for(t.num_tokens + n) - static_cast<int>(t.blocks.size()));
}

bool KvCacheManager::append_slots(SeqId id, int n) {
  BlockTable& t = tables_.at(id);
  if (kind_ == AllocatorKind::kContiguous) {
    if (t.num_tokens + n > max_seq_len_) return false;
    t.num_tokens += n;
    return true;
  }
  const int need = blocks_needed(id, n);
  if (need > pool_.num_free()) return false;
  for (int i = 0; i < need; ++i) {
    BlockId b = *pool_.allocate();
    t.blocks.push_back(b);
    emit(EventType::kBlockAllocated, id, b, static_cast<int>(t.blocks.size()) - 1);
  }
  t.num_tokens += n;
  if (need > 0) {
    emit(EventType::kBlockTableUpdated, id, BlockId(-1), -1, static_cast<std::int64_t>(t.blocks.size()),
         t.num_tokens);
  }
  return true;
}

void KvCacheManager::free_sequence(SeqId id) {
  auto it = tables_.find(id);
  if (it == tables_.end()) return;
  const auto& blocks = it->second.blocks;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    pool_.release(blocks[i]);
    emit(EventType::kBlockFreed, id, blocks[i], static_cast<int>(i));
  }
  tables_.erase(it);
  order_.erase(std::find(order_.begin(), order_.end(), id));
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

std::vector<SeqId> KvCacheManager::sequences() const { return order_; }

long KvCacheManager::allocated_slots() const {
  long slots = 0;
  for (const auto& [id, t] : tables_) slots += static_cast<long>(t.blocks.size()) * layout_.block_size;
  return slots;
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
    if (t.num_tokens < 0) throw Error("kv cache invariant", who + " has a negative token count");
    if (kind_ == AllocatorKind::kPaged && static_cast<int>(t.blocks.size()) != blocks_for(t.num_tokens)) {
      throw Error("kv cache invariant", who + " holds " + std::to_string(t.blocks.size()) +
                                            " blocks for " + std::to_string(t.num_tokens) + " tokens");
    }
    if (kind_ == AllocatorKind::kContiguous) {
      if (static_cast<int>(t.blocks.size()) != t.reserved_blocks || t.num_tokens > max_seq_len_) {
        throw Error("kv cache invariant", who + " reservation does not match its table");
      }
      for (std::size_t i = 1; i < t.blocks.size(); ++i) {
        if (t.blocks[i].value != t.blocks[i - 1].value + 1) {
          throw Error("kv cache invariant", who + " contiguous region is not consecutive");
        }
      }
    }
    for (BlockId b : t.blocks) {
      if (b.value < 0 || b.value >= pool_.num_blocks()) {
        throw Error("kv cache invariant", who + " maps to bad block " + std::to_string(b.value));
      }
      ++owners[static_cast<std::size_t>(b.value)];
    }
  }
  for (int b = 0; b < pool_.num_blocks(); ++b) {
    const int rc = pool_.ref_count(BlockId(b));
    if (owners[static_cast<std::size_t>(b)] != rc) {
      throw Error("kv cache invariant", "block " + std::to_string(b) + " has ref count " +
                                            std::to_string(rc) + " but " +
                                            std::to_string(owners[static_cast<std::size_t>(b)]) +
                                            " owners");
    }
  }
}

}  // namespace kvscope

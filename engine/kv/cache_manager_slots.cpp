// KvCacheManager: the slot-level operations token eviction needs (remove a block from the middle
// of a table, move a token between slots, drop trailing slots). Bookkeeping plus byte copies.
#include <algorithm>
#include <string>

#include "engine/common/error.h"
#include "engine/kv/cache_manager.h"

namespace kvscope {

void KvCacheManager::check_evictable(SeqId id, const std::string& where) const {
  if (!has_sequence(id)) throw Error(where, "no sequence " + std::to_string(id.value));
  if (kind_ != AllocatorKind::kPaged) {
    throw Error(where,
                "token eviction needs the paged allocator, got contiguous (a reserved "
                "region has no blocks to give back)");
  }
  if (source_ != nullptr) {
    throw Error(where,
                "token eviction with prefix caching is not supported (evicting or moving "
                "a token in a shared block would change other sequences)");
  }
  if (layout_.k_format.is_kivi() || layout_.v_format.is_kivi()) {
    throw Error(where,
                "token eviction with a KIVI format is not supported (KIVI groups "
                "consecutive slots); expected fp32, fp16, bf16, fp8, int8, int4 or int2");
  }
}

void KvCacheManager::remove_block(SeqId id, int logical) {
  check_evictable(id, "kv cache");
  BlockTable& t = tables_.at(id);
  const int n = static_cast<int>(t.blocks.size());
  if (logical < 0 || logical >= n) {
    fail_expected("kv cache: remove_block", "a logical block in [0, " + std::to_string(n) + ")",
                  std::to_string(logical));
  }
  const BlockId b = t.blocks[static_cast<std::size_t>(logical)];
  // Slots of this block: block_size, or fewer when it is the partially filled last block.
  const int slots = std::min(layout_.block_size, t.num_tokens - logical * layout_.block_size);
  pool_.release(b);
  if (storage_ && pool_.is_free(b)) storage_->drop_block_staging(b);
  t.blocks.erase(t.blocks.begin() + logical);
  t.num_tokens -= slots;
  emit(ev::BlockFreed{id.value, b.value, logical, /*from_inside=*/true});
  emit(ev::BlockTableUpdated{id.value, static_cast<std::int64_t>(t.blocks.size()), t.num_tokens});
}

void KvCacheManager::move_slot(SeqId id, int from, int to) {
  check_evictable(id, "kv cache");
  const BlockTable& t = table(id);
  for (int s : {from, to}) {
    if (s < 0 || s >= t.num_tokens) {
      fail_expected("kv cache: move_slot", "a slot in [0, " + std::to_string(t.num_tokens) + ")",
                    std::to_string(s));
    }
  }
  if (from == to) return;
  const int bs = layout_.block_size;
  const BlockId src = t.blocks[static_cast<std::size_t>(from / bs)];
  const BlockId dst = t.blocks[static_cast<std::size_t>(to / bs)];
  if (storage_) storage_->copy_slot(src, from % bs, dst, to % bs);
  emit(ev::SlotMoved{id.value, dst.value, to / bs, from, to});
}

void KvCacheManager::truncate(SeqId id, int num_tokens) {
  check_evictable(id, "kv cache");
  BlockTable& t = tables_.at(id);
  if (num_tokens < 0 || num_tokens > t.num_tokens) {
    fail_expected("kv cache: truncate",
                  "a token count in [0, " + std::to_string(t.num_tokens) + "]",
                  std::to_string(num_tokens));
  }
  const int keep = blocks_for(num_tokens);
  for (int i = static_cast<int>(t.blocks.size()) - 1; i >= keep; --i) {
    const BlockId b = t.blocks[static_cast<std::size_t>(i)];
    pool_.release(b);
    if (storage_ && pool_.is_free(b)) storage_->drop_block_staging(b);
    t.blocks.pop_back();
    emit(ev::BlockFreed{id.value, b.value, i});
  }
  t.num_tokens = num_tokens;
  emit(ev::BlockTableUpdated{id.value, static_cast<std::int64_t>(t.blocks.size()), t.num_tokens});
}

}  // namespace kvscope

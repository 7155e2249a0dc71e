// See kivi_open_groups.h.
#include "kernels/backend/kivi_open_groups.h"

#include <algorithm>
#include <utility>

namespace kvscope {

std::int64_t KiviOpenGroups::key(int layer, KvKind kind, const KvSeqView& view, int first) const {
  const BlockId block = view.blocks[static_cast<std::size_t>(first / block_size_)];
  return ((static_cast<std::int64_t>(block.value) * block_size_ + first % block_size_) * n_layers_ +
          layer) *
             2 +
         static_cast<int>(kind);
}

long KiviOpenGroups::find(std::int64_t key) const {
  const auto it = open_.find(key);
  return it == open_.end() ? -1 : it->second;
}

long KiviOpenGroups::take(std::int64_t key) {
  if (const long at = find(key); at >= 0) return at;
  if (free_.empty()) grow();
  const long at = free_.back();
  free_.pop_back();
  open_.emplace(key, at);
  return at;
}

void KiviOpenGroups::give_back(std::int64_t key) {
  const auto it = open_.find(key);
  if (it == open_.end()) return;
  free_.push_back(it->second);
  open_.erase(it);
}

void KiviOpenGroups::drop_block(BlockId block) {
  const std::int64_t per_block = static_cast<std::int64_t>(block_size_) * n_layers_ * 2;
  std::erase_if(open_, [&](const auto& e) {
    if (e.first / per_block != block.value) return false;
    free_.push_back(e.second);
    return true;
  });
}

void KiviOpenGroups::grow() {
  const long entries = std::max(4L, 2 * capacity_);
  DeviceBuffer bigger(ops_, static_cast<std::size_t>(entries * entry_floats_) * sizeof(float));
  if (capacity_ > 0) {
    ops_.copy_on_device(bigger.as<void>(), arena_.as<void>(),
                        static_cast<std::size_t>(capacity_ * entry_floats_) * sizeof(float));
  }
  for (long e = entries - 1; e >= capacity_; --e) free_.push_back(e * entry_floats_);
  arena_ = std::move(bigger);
  capacity_ = entries;
}

}  // namespace kvscope

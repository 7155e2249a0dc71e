// BlockSlots: lowest-first slot numbering over an optional RAM buffer.
#include "engine/tiers/block_slots.h"

#include <string>

#include "engine/common/error.h"

namespace kvscope {

BlockSlots::BlockSlots(int capacity, std::size_t block_bytes, bool in_ram)
    : capacity_(capacity), block_bytes_(block_bytes) {
  if (capacity < 0)
    throw InternalError("BlockSlots", "capacity " + std::to_string(capacity) + " is negative");
  const std::size_t bytes = static_cast<std::size_t>(capacity) * block_bytes;
  if (in_ram && bytes > 0) ram_ = ZeroedBuffer(bytes);
}

std::optional<int> BlockSlots::lowest_free() const {
  if (!freed_.empty()) return freed_.top();
  if (next_unused_ < capacity_) return next_unused_;
  return std::nullopt;
}

int BlockSlots::take() {
  if (!freed_.empty()) {
    const int s = freed_.top();
    freed_.pop();
    return s;
  }
  if (next_unused_ >= capacity_)
    throw InternalError("BlockSlots", "take() with all " + std::to_string(capacity_) + " taken");
  return next_unused_++;
}

void BlockSlots::release(int slot) {
  if (slot < 0 || slot >= capacity_) {
    throw InternalError("BlockSlots", "release of slot " + std::to_string(slot) + " outside [0, " +
                                          std::to_string(capacity_) + ")");
  }
  freed_.push(slot);
}

}  // namespace kvscope

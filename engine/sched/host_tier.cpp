// Host swap tier: slot bookkeeping, and block copies to and from the pool (KvStorage::read_block
// and write_block, which reach the device copy when a backend holds the pool).
#include "engine/sched/host_tier.h"

#include <algorithm>
#include <functional>
#include <string>

#include "engine/common/error.h"

namespace kvscope {

HostKvTier::HostKvTier(const KvLayout& layout, int capacity_blocks, bool with_storage)
    : capacity_(capacity_blocks), block_bytes_(layout.block_bytes()) {
  if (capacity_blocks < 0) {
    fail_expected("host tier: capacity", "a non-negative number of blocks",
                  std::to_string(capacity_blocks));
  }
  if (with_storage) bytes_.resize(static_cast<std::size_t>(capacity_blocks) * block_bytes_);
  for (int s = capacity_blocks - 1; s >= 0; --s) free_.push_back(s);
}

std::vector<int> HostKvTier::swap_out(const KvStorage* device, std::span<const BlockId> blocks) {
  if (blocks.size() > free_.size()) {
    throw Error("host tier", "swap_out of " + std::to_string(blocks.size()) + " blocks with only " +
                                 std::to_string(free_.size()) + " free");
  }
  std::vector<int> slots;
  for (BlockId b : blocks) {
    const int s = free_.back();
    free_.pop_back();
    slots.push_back(s);
    if (!bytes_.empty() && device != nullptr) device->read_block(b, slot(s));
  }
  return slots;
}

void HostKvTier::swap_in(std::span<const int> slots, KvStorage* device,
                         std::span<const BlockId> blocks) {
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (!bytes_.empty() && device != nullptr && i < blocks.size())
      device->write_block(blocks[i], slot(slots[i]));
  }
  // Return slots so that the lowest id is taken first next time (deterministic reuse).
  for (int s : slots) free_.push_back(s);
  std::sort(free_.begin(), free_.end(), std::greater<int>());
}

}  // namespace kvscope

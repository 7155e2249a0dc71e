// Host swap tier: slot bookkeeping, and block copies to and from the pool (KvStorage::read_block
// and write_block, which reach the device copy when a backend holds the pool).
#include "engine/tiers/host_tier.h"

#include <algorithm>
#include <new>
#include <string>

#include "engine/common/error.h"

namespace kvscope {

HostKvTier::HostKvTier(const KvLayout& layout, int capacity_blocks, bool with_storage) {
  if (capacity_blocks < 0) {
    fail_expected("host tier: capacity", "a non-negative number of blocks",
                  std::to_string(capacity_blocks));
  }
  try {
    slots_ = BlockSlots(capacity_blocks, layout.block_bytes(), with_storage);
  } catch (const std::bad_alloc&) {
    fail_expected("cache.host_blocks", "a swap space this machine can map",
                  std::to_string(capacity_blocks) + " blocks of " +
                      std::to_string(layout.block_bytes()) + " bytes");
  }
}

std::vector<int> HostKvTier::swap_out(const KvStorage* device, std::span<const BlockId> blocks) {
  if (blocks.size() > static_cast<std::size_t>(slots_.num_free())) {
    throw Error("host tier", "swap_out of " + std::to_string(blocks.size()) + " blocks with only " +
                                 std::to_string(slots_.num_free()) + " free");
  }
  std::vector<int> slots;
  for (BlockId b : blocks) {
    const int s = slots_.take();
    slots.push_back(s);
    if (slots_.in_ram() && device != nullptr) device->read_block(b, slots_.bytes(s));
  }
  return slots;
}

void HostKvTier::swap_in(std::span<const int> slots, KvStorage* device,
                         std::span<const BlockId> blocks) {
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (slots_.in_ram() && device != nullptr && i < blocks.size())
      device->write_block(blocks[i], slots_.bytes(slots[i]));
  }
  for (int s : slots) slots_.release(s);  // the lowest id is taken first next time
}

}  // namespace kvscope

// BlockSlots: a fixed number of numbered slots of one KV block each, handed out lowest free id
// first (so which slot a block lands in never depends on anything but the order of takes and
// releases), with the blocks' bytes in host RAM when `in_ram` (anonymous memory, backed only once
// written). The one place kvscope keeps KV block bytes in host memory: the swap space
// (HostKvTier) and a host KV tier (KvTierStore) each keep their blocks in one; a disk tier numbers
// its file's records with one that holds no bytes.
//
// Invariant: every slot in [0, capacity) is either free or taken, never both; num_free() counts
// the free ones.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <queue>
#include <vector>

#include "engine/common/zeroed_buffer.h"

namespace kvscope {

class BlockSlots {
 public:
  BlockSlots() = default;
  // Throws std::bad_alloc when the machine cannot map capacity x block_bytes of RAM.
  BlockSlots(int capacity, std::size_t block_bytes, bool in_ram);

  int capacity() const { return capacity_; }
  int num_free() const { return static_cast<int>(freed_.size()) + (capacity_ - next_unused_); }
  int num_taken() const { return capacity_ - num_free(); }
  // The slot take() would return; nullopt when every slot is taken.
  std::optional<int> lowest_free() const;
  // Takes the lowest free slot; throws kvscope::InternalError when none is free.
  int take();
  // Gives a taken slot back; throws kvscope::InternalError for a slot outside [0, capacity).
  void release(int slot);

  bool in_ram() const { return ram_.data() != nullptr; }
  std::size_t ram_bytes() const { return ram_.size(); }
  // The slot's bytes (block_bytes of them); only when in_ram().
  std::byte* bytes(int slot) const {
    return ram_.data() + static_cast<std::size_t>(slot) * block_bytes_;
  }

 private:
  int capacity_ = 0;
  std::size_t block_bytes_ = 0;
  // Free slots: every one from next_unused_ on, and those given back below it (lowest on top).
  int next_unused_ = 0;
  std::priority_queue<int, std::vector<int>, std::greater<int>> freed_;
  ZeroedBuffer ram_;
};

}  // namespace kvscope

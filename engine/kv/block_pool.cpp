// BlockPool implementation.
#include "engine/kv/block_pool.h"

#include <string>

#include "engine/common/error.h"

namespace kvscope {

namespace {
// The size, checked before anything is allocated for it.
std::size_t positive_size(int num_blocks) {
  if (num_blocks <= 0) {
    fail_expected("block pool: num_blocks", "a positive integer", std::to_string(num_blocks));
  }
  return static_cast<std::size_t>(num_blocks);
}
}  // namespace

BlockPool::BlockPool(int num_blocks)
    : ref_count_(positive_size(num_blocks), 0),
      prev_(static_cast<std::size_t>(num_blocks) + 1),
      next_(static_cast<std::size_t>(num_blocks) + 1) {
  const std::int32_t s = num_blocks;
  prev_[static_cast<std::size_t>(s)] = next_[static_cast<std::size_t>(s)] = s;
  for (std::int32_t i = 0; i < num_blocks; ++i) push_back(i);
}

void BlockPool::unlink(std::int32_t i) {
  const auto u = static_cast<std::size_t>(i);
  next_[static_cast<std::size_t>(prev_[u])] = next_[u];
  prev_[static_cast<std::size_t>(next_[u])] = prev_[u];
  --num_free_;
}

void BlockPool::push_back(std::int32_t i) {
  const std::int32_t s = num_blocks();
  const auto u = static_cast<std::size_t>(i);
  const std::int32_t last = prev_[static_cast<std::size_t>(s)];
  prev_[u] = last;
  next_[u] = s;
  next_[static_cast<std::size_t>(last)] = i;
  prev_[static_cast<std::size_t>(s)] = i;
  ++num_free_;
}

std::optional<BlockId> BlockPool::peek_free() const {
  const std::int32_t first = next_[static_cast<std::size_t>(num_blocks())];
  if (first == num_blocks()) return std::nullopt;
  return BlockId(first);
}

std::optional<BlockId> BlockPool::allocate() {
  auto id = peek_free();
  if (!id) return std::nullopt;
  unlink(id->value);
  ref_count_[static_cast<std::size_t>(id->value)] = 1;
  return id;
}

std::optional<BlockId> BlockPool::allocate_run(int n) {
  if (n <= 0 || n > num_free_) return std::nullopt;
  int run = 0;
  for (int i = 0; i < num_blocks(); ++i) {
    run = ref_count_[static_cast<std::size_t>(i)] == 0 ? run + 1 : 0;
    if (run == n) {
      const int first = i - n + 1;
      for (int j = first; j <= i; ++j) {
        unlink(j);
        ref_count_[static_cast<std::size_t>(j)] = 1;
      }
      return BlockId(first);
    }
  }
  return std::nullopt;
}

void BlockPool::check_id(BlockId id, const char* op) const {
  if (id.value < 0 || id.value >= num_blocks()) {
    throw InternalError("block pool", std::string(op) + "(" + std::to_string(id.value) +
                                          "): no such block (the pool has " +
                                          std::to_string(num_blocks()) + ")");
  }
}

void BlockPool::take(BlockId id) {
  check_id(id, "take");
  if (!is_free(id))
    throw InternalError("block pool", "take(" + std::to_string(id.value) + "): block is in use");
  unlink(id.value);
  ref_count_[static_cast<std::size_t>(id.value)] = 1;
}

void BlockPool::release(BlockId id) {
  check_id(id, "release");
  auto& rc = ref_count_[static_cast<std::size_t>(id.value)];
  if (rc <= 0)
    throw InternalError("block pool",
                        "release(" + std::to_string(id.value) + "): block is already free");
  if (--rc == 0) push_back(id.value);
}

void BlockPool::add_ref(BlockId id) {
  check_id(id, "add_ref");
  auto& rc = ref_count_[static_cast<std::size_t>(id.value)];
  if (rc <= 0)
    throw InternalError("block pool", "add_ref(" + std::to_string(id.value) + "): block is free");
  ++rc;
}

int BlockPool::largest_free_run() const {
  int best = 0, run = 0;
  for (std::int32_t rc : ref_count_) {
    run = rc == 0 ? run + 1 : 0;
    best = std::max(best, run);
  }
  return best;
}

std::vector<BlockId> BlockPool::free_queue() const {
  std::vector<BlockId> out;
  out.reserve(static_cast<std::size_t>(num_free_));
  const std::int32_t s = num_blocks();
  for (std::int32_t i = next_[static_cast<std::size_t>(s)]; i != s;
       i = next_[static_cast<std::size_t>(i)]) {
    out.emplace_back(i);
  }
  return out;
}

void BlockPool::check_invariants() const {
  const std::int32_t s = num_blocks();
  int in_queue = 0;
  std::vector<char> seen(static_cast<std::size_t>(s), 0);
  for (std::int32_t i = next_[static_cast<std::size_t>(s)]; i != s;
       i = next_[static_cast<std::size_t>(i)]) {
    if (i < 0 || i > s)
      throw InternalError("block pool invariant", "free queue holds bad id " + std::to_string(i));
    if (seen[static_cast<std::size_t>(i)])
      throw InternalError("block pool invariant",
                          "block " + std::to_string(i) + " is twice in the free queue");
    seen[static_cast<std::size_t>(i)] = 1;
    if (ref_count_[static_cast<std::size_t>(i)] != 0) {
      throw InternalError("block pool invariant",
                          "block " + std::to_string(i) + " is in the free queue with ref count " +
                              std::to_string(ref_count_[static_cast<std::size_t>(i)]));
    }
    if (++in_queue > s) throw InternalError("block pool invariant", "free queue has a cycle");
  }
  for (std::int32_t i = 0; i < s; ++i) {
    const auto rc = ref_count_[static_cast<std::size_t>(i)];
    if (rc < 0)
      throw InternalError("block pool invariant",
                          "block " + std::to_string(i) + " has negative ref count");
    if (rc == 0 && !seen[static_cast<std::size_t>(i)]) {
      throw InternalError("block pool invariant",
                          "free block " + std::to_string(i) + " is missing from the free queue");
    }
  }
  if (in_queue != num_free_) {
    throw InternalError("block pool invariant", "num_free is " + std::to_string(num_free_) +
                                                    " but the queue holds " +
                                                    std::to_string(in_queue));
  }
}

}  // namespace kvscope

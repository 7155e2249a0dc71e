// Hash-chain prefix index (vLLM style): each full block is keyed by hash(parent key, tokens); a
// lookup walks block by block and confirms every key hit by comparing parent key and tokens.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "engine/prefix/prefix_index.h"

namespace kvscope {

class HashChainIndex final : public PrefixIndex {
 public:
  HashChainIndex(int block_size, BlockHashFn hash);
  IndexKind kind() const override { return IndexKind::kHashChain; }
  IndexMatch match(std::span<const TokenId> tokens, int max_blocks) const override;
  std::vector<IndexedBlock> insert(std::span<const TokenId> tokens,
                                   std::span<const BlockId> blocks) override;
  void erase(BlockId block) override;
  bool contains(BlockId block) const override { return key_of_.count(block.value) != 0; }
  std::optional<BlockId> parent_of(BlockId block) const override;
  std::size_t num_blocks() const override { return entries_.size(); }
  std::vector<BlockId> blocks() const override;
  void check_invariants() const override;

 private:
  struct Entry {
    BlockId block;
    std::uint64_t parent_key = kRootKey;
    std::int32_t num_children = 0;
    std::vector<TokenId> tokens;  // [block_size], the collision guard
  };
  // The entry for `key` if it really holds `tokens` after `parent_key`; counts collisions.
  const Entry* confirm(std::uint64_t key, std::uint64_t parent_key, std::span<const TokenId> tokens,
                       std::int64_t& collisions) const;
  BlockHashFn hash_;
  std::unordered_map<std::uint64_t, Entry> entries_;        // key -> entry
  std::unordered_map<std::int32_t, std::uint64_t> key_of_;  // block id -> key
};

}  // namespace kvscope

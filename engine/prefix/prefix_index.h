// PrefixIndex: maps prompt prefixes, in whole blocks, to the physical blocks that hold their K/V.
// Two interchangeable implementations: a vLLM-style hash chain and an SGLang-style radix tree.
// The index only maps; ref counts and eviction order live in PrefixCache.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "engine/kv/ids.h"
#include "engine/prefix/block_hash.h"

namespace kvscope {

enum class IndexKind : std::uint8_t { kHashChain, kRadix };
std::string_view index_kind_name(IndexKind kind);  // "hash" / "radix"
std::optional<IndexKind> parse_index_kind(std::string_view name);

struct IndexMatch {
  std::vector<BlockId> blocks;      // cached blocks of the longest whole-block prefix, in order
  std::int64_t matched_tokens = 0;  // tokens equal to some cached prefix: token-granular for the
                                    // radix tree, whole blocks for the hash chain (= diverged-at)
  std::int64_t collisions = 0;      // key hits rejected by the token comparison (hash chain)
};

struct IndexedBlock {
  BlockId block;                  // the block the index holds for this prefix
  bool added = false;             // true: `block` was newly indexed by this insert
  std::optional<BlockId> parent;  // the index's block for the preceding prefix (none: first)
};

class PrefixIndex {
 public:
  virtual ~PrefixIndex() = default;
  virtual IndexKind kind() const = 0;
  int block_size() const { return block_size_; }

  // Longest cached prefix of `tokens` made of whole blocks, at most `max_blocks` of them.
  virtual IndexMatch match(std::span<const TokenId> tokens, int max_blocks) const = 0;
  // Indexes a sequence's full blocks: blocks[i] holds tokens[i*bs, (i+1)*bs). Where a prefix is
  // already indexed the existing block is reported (added = false) and `blocks[i]` is not used.
  // The result is shorter than `blocks` when a hash collision stops the walk.
  virtual std::vector<IndexedBlock> insert(std::span<const TokenId> tokens,
                                           std::span<const BlockId> blocks) = 0;
  // Removes an indexed block that has no indexed children; throws kvscope::Error otherwise.
  virtual void erase(BlockId block) = 0;
  virtual bool contains(BlockId block) const = 0;
  virtual std::optional<BlockId> parent_of(BlockId block) const = 0;
  virtual std::size_t num_blocks() const = 0;
  // Every indexed block (any order).
  virtual std::vector<BlockId> blocks() const = 0;
  // Throws kvscope::Error describing the first inconsistency found.
  virtual void check_invariants() const = 0;

 protected:
  explicit PrefixIndex(int block_size);
  int block_size_;
};

// `hash` is used by the hash chain only (nullptr: strong_block_hash).
std::unique_ptr<PrefixIndex> make_prefix_index(IndexKind kind, int block_size,
                                               BlockHashFn hash = nullptr);

}  // namespace kvscope

// HashChainIndex implementation, and the PrefixIndex factory and names.
#include "engine/prefix/hash_chain_index.h"

#include <algorithm>
#include <string>

#include "engine/common/error.h"
#include "engine/prefix/radix_index.h"

namespace kvscope {

PrefixIndex::PrefixIndex(int block_size) : block_size_(block_size) {
  if (block_size <= 0)
    fail_expected("prefix index: block_size", "a positive integer", std::to_string(block_size));
}

std::string_view index_kind_name(IndexKind kind) {
  return kind == IndexKind::kRadix ? "radix" : "hash";
}

std::optional<IndexKind> parse_index_kind(std::string_view name) {
  if (name == "hash") return IndexKind::kHashChain;
  if (name == "radix") return IndexKind::kRadix;
  return std::nullopt;
}

std::unique_ptr<PrefixIndex> make_prefix_index(IndexKind kind, int block_size, BlockHashFn hash) {
  if (kind == IndexKind::kRadix) return std::make_unique<RadixIndex>(block_size);
  return std::make_unique<HashChainIndex>(block_size, hash ? hash : &strong_block_hash);
}

HashChainIndex::HashChainIndex(int block_size, BlockHashFn hash)
    : PrefixIndex(block_size), hash_(hash) {}

const HashChainIndex::Entry* HashChainIndex::confirm(std::uint64_t key, std::uint64_t parent_key,
                                                     std::span<const TokenId> tokens,
                                                     std::int64_t& collisions) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  const Entry& e = it->second;
  if (e.parent_key != parent_key || !std::equal(tokens.begin(), tokens.end(), e.tokens.begin())) {
    ++collisions;  // same key, different prefix: a hash collision caught by the guard
    return nullptr;
  }
  return &e;
}

IndexMatch HashChainIndex::match(std::span<const TokenId> tokens, int max_blocks) const {
  IndexMatch m;
  const auto bs = static_cast<std::size_t>(block_size_);
  const int n = std::min<int>(max_blocks, static_cast<int>(tokens.size() / bs));
  std::uint64_t key = kRootKey;
  for (int i = 0; i < n; ++i) {
    auto page = tokens.subspan(static_cast<std::size_t>(i) * bs, bs);
    const std::uint64_t k = hash_(key, page);
    const Entry* e = confirm(k, key, page, m.collisions);
    if (!e) break;
    m.blocks.push_back(e->block);
    key = k;
  }
  m.matched_tokens = static_cast<std::int64_t>(m.blocks.size() * bs);
  return m;
}

std::vector<IndexedBlock> HashChainIndex::insert(std::span<const TokenId> tokens,
                                                 std::span<const BlockId> blocks) {
  std::vector<IndexedBlock> out;
  const auto bs = static_cast<std::size_t>(block_size_);
  const std::size_t n = std::min(blocks.size(), tokens.size() / bs);
  out.reserve(n);
  std::uint64_t key = kRootKey;
  std::optional<BlockId> parent;
  std::int64_t collisions = 0;
  for (std::size_t i = 0; i < n; ++i) {
    auto page = tokens.subspan(i * bs, bs);
    const std::uint64_t k = hash_(key, page);
    if (const Entry* e = confirm(k, key, page, collisions)) {
      out.push_back({e->block, false, parent});
    } else if (collisions > 0) {
      break;  // the key is taken by another prefix: nothing below it can be indexed
    } else {
      if (key_of_.count(blocks[i].value)) {
        throw Error("hash chain index", "insert: block " + std::to_string(blocks[i].value) +
                                            " is already indexed for another prefix");
      }
      entries_.emplace(k, Entry{blocks[i], key, 0, std::vector<TokenId>(page.begin(), page.end())});
      key_of_.emplace(blocks[i].value, k);
      if (i > 0) ++entries_.at(key).num_children;
      out.push_back({blocks[i], true, parent});
    }
    parent = out.back().block;
    key = k;
  }
  return out;
}

void HashChainIndex::erase(BlockId block) {
  auto kit = key_of_.find(block.value);
  if (kit == key_of_.end())
    throw Error("hash chain index", "erase(" + std::to_string(block.value) + "): not indexed");
  auto it = entries_.find(kit->second);
  if (it->second.num_children != 0) {
    throw Error("hash chain index", "erase(" + std::to_string(block.value) + "): block has " +
                                        std::to_string(it->second.num_children) +
                                        " indexed children");
  }
  if (it->second.parent_key != kRootKey) --entries_.at(it->second.parent_key).num_children;
  entries_.erase(it);
  key_of_.erase(kit);
}

std::optional<BlockId> HashChainIndex::parent_of(BlockId block) const {
  auto kit = key_of_.find(block.value);
  if (kit == key_of_.end()) return std::nullopt;
  const Entry& e = entries_.at(kit->second);
  if (e.parent_key == kRootKey) return std::nullopt;
  return entries_.at(e.parent_key).block;
}

std::vector<BlockId> HashChainIndex::blocks() const {
  std::vector<BlockId> out;
  out.reserve(entries_.size());
  for (const auto& [key, e] : entries_) out.push_back(e.block);
  return out;
}

void HashChainIndex::check_invariants() const {
  const std::string where = "hash chain index invariant";
  if (key_of_.size() != entries_.size())
    throw InternalError(where, "block map and key map differ in size");
  std::unordered_map<std::uint64_t, std::int32_t> children;
  for (const auto& [key, e] : entries_) {
    const std::string b = "block " + std::to_string(e.block.value);
    auto kit = key_of_.find(e.block.value);
    if (kit == key_of_.end() || kit->second != key)
      throw InternalError(where, b + " is missing from the block map");
    if (e.tokens.size() != static_cast<std::size_t>(block_size_))
      throw InternalError(where, b + " holds a short token block");
    if (hash_(e.parent_key, e.tokens) != key)
      throw InternalError(where, b + " is stored under the wrong key");
    if (e.parent_key != kRootKey) {
      if (!entries_.count(e.parent_key))
        throw InternalError(where, b + " is unreachable: its parent is not indexed");
      ++children[e.parent_key];
    }
  }
  for (const auto& [key, e] : entries_) {
    const auto it = children.find(key);
    if ((it == children.end() ? 0 : it->second) != e.num_children) {
      throw InternalError(where,
                          "block " + std::to_string(e.block.value) + " has a wrong child count");
    }
  }
}

}  // namespace kvscope

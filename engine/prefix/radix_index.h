// Radix-tree prefix index (SGLang style): nodes hold runs of tokens, children are found by their
// first token, a partial match splits a node. With block_size > 1 matching and splits are
// page-aligned (a node holds whole pages, one physical block each); divergence is still reported
// at the exact token.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "engine/prefix/prefix_index.h"

namespace kvscope {

class RadixIndex final : public PrefixIndex {
 public:
  explicit RadixIndex(int block_size);
  IndexKind kind() const override { return IndexKind::kRadix; }
  IndexMatch match(std::span<const TokenId> tokens, int max_blocks) const override;
  std::vector<IndexedBlock> insert(std::span<const TokenId> tokens,
                                   std::span<const BlockId> blocks) override;
  void erase(BlockId block) override;
  bool contains(BlockId block) const override { return where_.count(block.value) != 0; }
  std::optional<BlockId> parent_of(BlockId block) const override;
  std::size_t num_blocks() const override { return where_.size(); }
  std::vector<BlockId> blocks() const override;
  void check_invariants() const override;

  // Tree shape, for tests and the UI: live nodes other than the root, and the pages of each.
  std::size_t num_nodes() const;
  // Page counts of the root's descendants in depth-first order (children by first token).
  std::vector<int> node_pages_dfs() const;

 private:
  struct Node {
    std::int32_t parent = -1;
    bool alive = false;
    std::vector<TokenId> tokens;  // [num_pages * block_size]
    std::vector<BlockId> pages;   // [num_pages], the block holding each page
    std::unordered_map<TokenId, std::vector<std::int32_t>> children;  // first token -> nodes
  };
  struct Loc {
    std::int32_t node;
    std::int32_t page;
  };
  int num_pages(const Node& n) const { return static_cast<int>(n.pages.size()); }
  // Tokens equal at the start of page `page` of node `n` and `page_tokens` (0..block_size).
  int common_in_page(const Node& n, int page, std::span<const TokenId> page_tokens) const;
  // The child of `node` whose first page equals `page_tokens`, or -1; `best_partial` receives the
  // longest token match against any child's first page.
  std::int32_t find_child(std::int32_t node, std::span<const TokenId> page_tokens,
                          int& best_partial) const;
  std::int32_t new_node(std::int32_t parent);
  void split(std::int32_t node, int at_page);
  void append_pages(std::int32_t node, std::span<const TokenId> tokens,
                    std::span<const BlockId> blocks);
  void dfs(std::int32_t node, std::vector<int>& out) const;

  std::vector<Node> nodes_;  // nodes_[0] is the root (no tokens)
  std::vector<std::int32_t> free_nodes_;
  std::unordered_map<std::int32_t, Loc> where_;  // block id -> (node, page)
};

}  // namespace kvscope

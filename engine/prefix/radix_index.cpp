// RadixIndex implementation: match, insert with node split, leaf-page erase.
#include "engine/prefix/radix_index.h"

#include <algorithm>
#include <string>

#include "engine/common/error.h"

namespace kvscope {

RadixIndex::RadixIndex(int block_size) : PrefixIndex(block_size) {
  nodes_.emplace_back();
  nodes_[0].alive = true;
}

int RadixIndex::common_in_page(const Node& n, int page,
                               std::span<const TokenId> page_tokens) const {
  const TokenId* a =
      n.tokens.data() + static_cast<std::size_t>(page) * static_cast<std::size_t>(block_size_);
  int k = 0;
  while (k < static_cast<int>(page_tokens.size()) &&
         a[k] == page_tokens[static_cast<std::size_t>(k)])
    ++k;
  return k;
}

std::int32_t RadixIndex::find_child(std::int32_t node, std::span<const TokenId> page_tokens,
                                    int& best_partial) const {
  best_partial = 0;
  const auto& kids = nodes_[static_cast<std::size_t>(node)].children;
  auto it = kids.find(page_tokens[0]);
  if (it == kids.end()) return -1;
  for (std::int32_t c : it->second) {
    const int k = common_in_page(nodes_[static_cast<std::size_t>(c)], 0, page_tokens);
    if (k == block_size_) return c;
    best_partial = std::max(best_partial, k);
  }
  return -1;
}

IndexMatch RadixIndex::match(std::span<const TokenId> tokens, int max_blocks) const {
  IndexMatch m;
  const auto bs = static_cast<std::size_t>(block_size_);
  const int total_pages = static_cast<int>(tokens.size() / bs);
  const int limit = std::min(max_blocks, total_pages);
  std::int32_t node = 0;
  int i = 0;  // pages of `tokens` matched so far
  while (i < total_pages) {
    auto page = tokens.subspan(static_cast<std::size_t>(i) * bs, bs);
    int partial = 0;
    const std::int32_t child = find_child(node, page, partial);
    if (child < 0) {
      m.matched_tokens = static_cast<std::int64_t>(i) * block_size_ + partial;
      break;
    }
    const Node& c = nodes_[static_cast<std::size_t>(child)];
    int j = 0;
    int in_page = block_size_;
    while (j < num_pages(c) && i < total_pages) {
      in_page = common_in_page(c, j, tokens.subspan(static_cast<std::size_t>(i) * bs, bs));
      if (in_page < block_size_) break;
      if (i < limit) m.blocks.push_back(c.pages[static_cast<std::size_t>(j)]);
      ++i;
      ++j;
    }
    m.matched_tokens = static_cast<std::int64_t>(i) * block_size_;
    if (in_page < block_size_) {
      m.matched_tokens += in_page;
      break;
    }
    if (j < num_pages(c)) break;  // the prompt's whole pages ran out inside this node
    node = child;
  }
  return m;
}

std::int32_t RadixIndex::new_node(std::int32_t parent) {
  std::int32_t id;
  if (!free_nodes_.empty()) {
    id = free_nodes_.back();
    free_nodes_.pop_back();
    nodes_[static_cast<std::size_t>(id)] = Node{};
  } else {
    id = static_cast<std::int32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  nodes_[static_cast<std::size_t>(id)].parent = parent;
  nodes_[static_cast<std::size_t>(id)].alive = true;
  return id;
}

void RadixIndex::append_pages(std::int32_t node, std::span<const TokenId> tokens,
                              std::span<const BlockId> blocks) {
  Node& n = nodes_[static_cast<std::size_t>(node)];
  for (std::size_t p = 0; p < blocks.size(); ++p) {
    if (where_.count(blocks[p].value)) {
      throw Error("radix index", "insert: block " + std::to_string(blocks[p].value) +
                                     " is already indexed for another prefix");
    }
    where_.emplace(blocks[p].value, Loc{node, num_pages(n)});
    n.pages.push_back(blocks[p]);
  }
  n.tokens.insert(n.tokens.end(), tokens.begin(), tokens.end());
}

// Splits `node` so it keeps pages [0, at_page) and a new child takes the rest and its children.
void RadixIndex::split(std::int32_t node, int at_page) {
  const std::int32_t tail = new_node(node);  // may reallocate nodes_: index, do not hold refs
  Node& n = nodes_[static_cast<std::size_t>(node)];
  Node& t = nodes_[static_cast<std::size_t>(tail)];
  const auto cut = static_cast<std::size_t>(at_page) * static_cast<std::size_t>(block_size_);
  t.tokens.assign(n.tokens.begin() + static_cast<std::ptrdiff_t>(cut), n.tokens.end());
  t.pages.assign(n.pages.begin() + at_page, n.pages.end());
  n.tokens.resize(cut);
  n.pages.resize(static_cast<std::size_t>(at_page));
  t.children = std::move(n.children);
  n.children.clear();
  n.children[t.tokens[0]].push_back(tail);
  for (auto& [first, kids] : t.children) {
    for (std::int32_t c : kids) nodes_[static_cast<std::size_t>(c)].parent = tail;
  }
  for (int p = 0; p < num_pages(t); ++p)
    where_[t.pages[static_cast<std::size_t>(p)].value] = Loc{tail, p};
}

std::vector<IndexedBlock> RadixIndex::insert(std::span<const TokenId> tokens,
                                             std::span<const BlockId> blocks) {
  const auto bs = static_cast<std::size_t>(block_size_);
  const int n = static_cast<int>(std::min(blocks.size(), tokens.size() / bs));
  std::vector<IndexedBlock> out;
  out.reserve(static_cast<std::size_t>(n));
  std::optional<BlockId> parent;
  std::int32_t node = 0;
  int i = 0;
  while (i < n) {
    auto page = tokens.subspan(static_cast<std::size_t>(i) * bs, bs);
    int partial = 0;
    const std::int32_t child = find_child(node, page, partial);
    if (child < 0) {
      // New pages: extend `node` if it is a childless non-root node, else hang a new child.
      const bool extend = node != 0 && nodes_[static_cast<std::size_t>(node)].children.empty();
      const std::int32_t target = extend ? node : new_node(node);
      if (!extend) nodes_[static_cast<std::size_t>(node)].children[page[0]].push_back(target);
      auto rest_blocks =
          blocks.subspan(static_cast<std::size_t>(i), static_cast<std::size_t>(n - i));
      append_pages(target,
                   tokens.subspan(static_cast<std::size_t>(i) * bs, rest_blocks.size() * bs),
                   rest_blocks);
      for (BlockId b : rest_blocks) {
        out.push_back({b, true, parent});
        parent = b;
      }
      break;
    }
    int j = 0;
    while (j < num_pages(nodes_[static_cast<std::size_t>(child)]) && i < n &&
           common_in_page(nodes_[static_cast<std::size_t>(child)], j,
                          tokens.subspan(static_cast<std::size_t>(i) * bs, bs)) == block_size_) {
      const BlockId b = nodes_[static_cast<std::size_t>(child)].pages[static_cast<std::size_t>(j)];
      out.push_back({b, false, parent});
      parent = b;
      ++i;
      ++j;
    }
    if (i < n && j < num_pages(nodes_[static_cast<std::size_t>(child)])) split(child, j);
    node = child;
  }
  return out;
}

void RadixIndex::erase(BlockId block) {
  auto it = where_.find(block.value);
  if (it == where_.end())
    throw Error("radix index", "erase(" + std::to_string(block.value) + "): not indexed");
  const Loc loc = it->second;
  Node& n = nodes_[static_cast<std::size_t>(loc.node)];
  if (loc.page != num_pages(n) - 1 || !n.children.empty()) {
    throw Error("radix index",
                "erase(" + std::to_string(block.value) + "): block has indexed children");
  }
  where_.erase(it);
  n.pages.pop_back();
  n.tokens.resize(n.pages.size() * static_cast<std::size_t>(block_size_));
  if (!n.pages.empty()) return;
  // The node is empty: unhook it from its parent.
  Node& p = nodes_[static_cast<std::size_t>(n.parent)];
  for (auto kit = p.children.begin(); kit != p.children.end(); ++kit) {
    auto& kids = kit->second;
    auto pos = std::find(kids.begin(), kids.end(), loc.node);
    if (pos == kids.end()) continue;
    kids.erase(pos);
    if (kids.empty()) p.children.erase(kit);
    break;
  }
  n = Node{};
  free_nodes_.push_back(loc.node);
}

std::optional<BlockId> RadixIndex::parent_of(BlockId block) const {
  auto it = where_.find(block.value);
  if (it == where_.end()) return std::nullopt;
  const Node& n = nodes_[static_cast<std::size_t>(it->second.node)];
  if (it->second.page > 0) return n.pages[static_cast<std::size_t>(it->second.page - 1)];
  if (n.parent == 0) return std::nullopt;
  return nodes_[static_cast<std::size_t>(n.parent)].pages.back();
}

std::vector<BlockId> RadixIndex::blocks() const {
  std::vector<BlockId> out;
  out.reserve(where_.size());
  for (const auto& [b, loc] : where_) out.emplace_back(b);
  return out;
}

std::size_t RadixIndex::num_nodes() const {
  return nodes_.size() - 1 - free_nodes_.size();
}

void RadixIndex::dfs(std::int32_t node, std::vector<int>& out) const {
  const Node& n = nodes_[static_cast<std::size_t>(node)];
  if (node != 0) out.push_back(num_pages(n));
  std::vector<TokenId> firsts;
  for (const auto& [first, kids] : n.children) firsts.push_back(first);
  std::sort(firsts.begin(), firsts.end());
  for (TokenId f : firsts) {
    for (std::int32_t c : n.children.at(f)) dfs(c, out);
  }
}

std::vector<int> RadixIndex::node_pages_dfs() const {
  std::vector<int> out;
  dfs(0, out);
  return out;
}

void RadixIndex::check_invariants() const {
  const std::string where = "radix index invariant";
  std::size_t pages = 0, reached = 0;
  std::vector<std::int32_t> stack{0};
  while (!stack.empty()) {
    const std::int32_t id = stack.back();
    stack.pop_back();
    const Node& n = nodes_[static_cast<std::size_t>(id)];
    const std::string nm = "node " + std::to_string(id);
    if (!n.alive) throw InternalError(where, nm + " is reachable but dead");
    if (id != 0 && n.pages.empty()) throw InternalError(where, nm + " holds no pages");
    if (n.tokens.size() != n.pages.size() * static_cast<std::size_t>(block_size_)) {
      throw InternalError(where, nm + " has tokens not matching its pages");
    }
    for (int p = 0; p < num_pages(n); ++p) {
      auto it = where_.find(n.pages[static_cast<std::size_t>(p)].value);
      if (it == where_.end() || it->second.node != id || it->second.page != p) {
        throw InternalError(where, "block " +
                                       std::to_string(n.pages[static_cast<std::size_t>(p)].value) +
                                       " is misplaced");
      }
    }
    pages += n.pages.size();
    ++reached;
    for (const auto& [first, kids] : n.children) {
      std::vector<std::int32_t> siblings;
      if (kids.empty()) throw InternalError(where, nm + " has an empty child bucket");
      for (std::int32_t c : kids) {
        const Node& k = nodes_[static_cast<std::size_t>(c)];
        if (k.parent != id)
          throw InternalError(where, "node " + std::to_string(c) + " has a wrong parent");
        if (k.tokens.empty() || k.tokens[0] != first)
          throw InternalError(where, "node " + std::to_string(c) + " is in the wrong bucket");
        for (std::int32_t s : siblings) {
          if (common_in_page(nodes_[static_cast<std::size_t>(s)], 0,
                             std::span<const TokenId>(k.tokens).first(
                                 static_cast<std::size_t>(block_size_))) == block_size_) {
            throw InternalError(where, "nodes " + std::to_string(s) + " and " + std::to_string(c) +
                                           " share a first page");
          }
        }
        siblings.push_back(c);
        stack.push_back(c);
      }
    }
  }
  if (pages != where_.size())
    throw InternalError(where, "block map holds blocks not reachable from the root");
  if (reached != num_nodes() + 1)
    throw InternalError(where, "live nodes not reachable from the root");
}

}  // namespace kvscope

// PrefixIndex tests: both implementations agree on block-aligned workloads, the radix tree splits
// on partial matches and reports token-granular divergence, the hash chain's collision guard.
#include <gtest/gtest.h>

#include <random>

#include "engine/common/error.h"
#include "engine/prefix/hash_chain_index.h"
#include "engine/prefix/radix_index.h"

namespace kvscope {
namespace {

std::vector<BlockId> ids(int first, int n) {
  std::vector<BlockId> out;
  for (int i = 0; i < n; ++i) out.emplace_back(first + i);
  return out;
}

std::vector<TokenId> concat(std::initializer_list<std::vector<TokenId>> parts) {
  std::vector<TokenId> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(PrefixIndex, BothIndexesAgreeOnBlockAlignedWorkloads) {
  for (int bs : {1, 4, 16}) {
    auto hash = make_prefix_index(IndexKind::kHashChain, bs);
    auto radix = make_prefix_index(IndexKind::kRadix, bs);
    std::mt19937 rng(7 + static_cast<unsigned>(bs));
    // Prompts are paths in a small tree of token blocks, so many share prefixes.
    std::vector<std::vector<TokenId>> words(6);
    for (auto& w : words) {
      for (int t = 0; t < bs; ++t) w.push_back(static_cast<TokenId>(rng() % 1000));
    }
    int next_block = 0;
    std::int64_t hits_hash = 0, hits_radix = 0;
    for (int r = 0; r < 300; ++r) {
      std::vector<TokenId> prompt;
      const int nb = 1 + static_cast<int>(rng() % 8);
      for (int b = 0; b < nb; ++b) {
        const auto& w = words[rng() % (b < 2 ? 2 : words.size())];
        prompt.insert(prompt.end(), w.begin(), w.end());
      }
      const IndexMatch mh = hash->match(prompt, nb);
      const IndexMatch mr = radix->match(prompt, nb);
      ASSERT_EQ(mh.blocks.size(), mr.blocks.size()) << "request " << r << " bs " << bs;
      hits_hash += static_cast<std::int64_t>(mh.blocks.size());
      hits_radix += static_cast<std::int64_t>(mr.blocks.size());
      // Insert with fresh ids for the missing tail; the existing prefix keeps its blocks.
      std::vector<BlockId> table = mh.blocks;
      for (int b = static_cast<int>(table.size()); b < nb; ++b) table.emplace_back(next_block++);
      auto ih = hash->insert(prompt, table);
      auto ir = radix->insert(prompt, table);
      ASSERT_EQ(ih.size(), ir.size());
      for (std::size_t i = 0; i < ih.size(); ++i) {
        EXPECT_EQ(ih[i].block, ir[i].block);
        EXPECT_EQ(ih[i].added, ir[i].added);
        EXPECT_EQ(ih[i].parent, ir[i].parent);
      }
    }
    EXPECT_EQ(hits_hash, hits_radix);
    EXPECT_GT(hits_hash, 300);  // the workload really shares prefixes
    EXPECT_EQ(hash->num_blocks(), radix->num_blocks());
    hash->check_invariants();
    radix->check_invariants();
  }
}

TEST(RadixIndex, SplitsANodeOnAPartialMatch) {
  RadixIndex radix(2);
  const std::vector<TokenId> a = {1, 2, 3, 4, 5, 6, 7, 8};
  radix.insert(a, ids(0, 4));
  EXPECT_EQ(radix.num_nodes(), 1u);
  EXPECT_EQ(radix.node_pages_dfs(), (std::vector<int>{4}));
  // Shares two pages, then departs in the middle of the third: split after page 2.
  const std::vector<TokenId> b = {1, 2, 3, 4, 5, 9, 10, 11};
  auto res = radix.insert(b, ids(10, 4));
  ASSERT_EQ(res.size(), 4u);
  EXPECT_FALSE(res[0].added);
  EXPECT_EQ(res[1].block, BlockId(1));
  EXPECT_TRUE(res[2].added);
  EXPECT_EQ(res[2].block, BlockId(12));
  EXPECT_EQ(res[2].parent, BlockId(1));
  EXPECT_EQ(radix.num_nodes(), 3u);
  EXPECT_EQ(radix.node_pages_dfs(), (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(radix.parent_of(BlockId(2)), BlockId(1));  // moved into the split-off tail
  EXPECT_EQ(radix.parent_of(BlockId(0)), std::nullopt);
  radix.check_invariants();
  // Token-granular divergence: matches 5 tokens of a, then departs at token 5 (page-aligned: 2).
  const IndexMatch m = radix.match(std::vector<TokenId>{1, 2, 3, 4, 5, 0, 0, 0}, 4);
  EXPECT_EQ(m.blocks.size(), 2u);
  EXPECT_EQ(m.matched_tokens, 5);
}

TEST(RadixIndex, TokenLevelTreeWithBlockSizeOne) {
  RadixIndex radix(1);
  radix.insert(std::vector<TokenId>{1, 2, 3, 4}, ids(0, 4));
  radix.insert(std::vector<TokenId>{1, 2, 7, 8}, ids(4, 4));
  radix.insert(std::vector<TokenId>{1, 2, 7}, ids(8, 3));  // fully inside: nothing added
  EXPECT_EQ(radix.node_pages_dfs(), (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(radix.num_blocks(), 6u);
  EXPECT_EQ(radix.match(std::vector<TokenId>{1, 2, 7, 9}, 4).matched_tokens, 3);
  radix.check_invariants();
}

TEST(RadixIndex, ErasesOnlyLeafPagesAndDropsEmptyNodes) {
  RadixIndex radix(1);
  radix.insert(std::vector<TokenId>{1, 2, 3}, ids(0, 3));
  radix.insert(std::vector<TokenId>{1, 2, 9}, ids(3, 3));
  EXPECT_THROW(radix.erase(BlockId(1)), Error);  // has children
  radix.erase(BlockId(5));                       // the "9" leaf: its node disappears
  EXPECT_EQ(radix.num_nodes(), 2u);
  radix.erase(BlockId(2));
  radix.erase(BlockId(1));
  EXPECT_EQ(radix.match(std::vector<TokenId>{1, 2, 3}, 3).blocks, ids(0, 1));
  radix.check_invariants();
  EXPECT_THROW(radix.erase(BlockId(42)), Error);
}

// A deliberately weak hash: every block at the same depth gets the same key.
std::uint64_t weak_hash(std::uint64_t parent, std::span<const TokenId>) {
  return parent * 31 + 1;
}

TEST(HashChainIndex, CollisionGuardRejectsAKeyHitWithOtherTokens) {
  HashChainIndex weak(2, &weak_hash);
  const std::vector<TokenId> a = {1, 2, 3, 4};
  const std::vector<TokenId> b = {1, 2, 5, 6};  // same first block, different second
  weak.insert(a, ids(0, 2));
  const IndexMatch m = weak.match(b, 2);
  EXPECT_EQ(m.blocks, ids(0, 1));  // the first block is genuinely shared
  EXPECT_EQ(m.collisions, 1);      // the second key hit was a collision and was rejected
  const auto res = weak.insert(b, ids(10, 2));
  EXPECT_EQ(res.size(), 1u);  // the taken key stops the insert; nothing wrong is cached
  EXPECT_EQ(weak.match(a, 2).blocks, ids(0, 2));
  weak.check_invariants();
  // The same workload under the strong hash indexes both.
  HashChainIndex strong(2, &strong_block_hash);
  strong.insert(a, ids(0, 2));
  EXPECT_EQ(strong.insert(b, ids(10, 2)).size(), 2u);
  EXPECT_EQ(strong.match(b, 2).collisions, 0);
}

TEST(HashChainIndex, DivergenceIsBlockGranularAndEraseNeedsALeaf) {
  HashChainIndex h(4, &strong_block_hash);
  const auto a = concat({{1, 2, 3, 4}, {5, 6, 7, 8}});
  h.insert(a, ids(0, 2));
  const IndexMatch m = h.match(concat({{1, 2, 3, 4}, {5, 6, 0, 0}}), 2);
  EXPECT_EQ(m.blocks.size(), 1u);
  EXPECT_EQ(m.matched_tokens, 4);  // the hash chain cannot see the 2 equal tokens in block 1
  EXPECT_THROW(h.erase(BlockId(0)), Error);
  EXPECT_EQ(h.parent_of(BlockId(1)), BlockId(0));
  h.erase(BlockId(1));
  h.erase(BlockId(0));
  EXPECT_EQ(h.num_blocks(), 0u);
  h.check_invariants();
}

TEST(PrefixIndex, NamesParse) {
  EXPECT_EQ(parse_index_kind("radix"), IndexKind::kRadix);
  EXPECT_EQ(parse_index_kind("hash"), IndexKind::kHashChain);
  EXPECT_EQ(parse_index_kind("trie"), std::nullopt);
  EXPECT_THROW(RadixIndex(0), Error);
}

}  // namespace
}  // namespace kvscope

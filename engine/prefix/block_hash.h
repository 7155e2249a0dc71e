// Hashes for prefix blocks: a block's key = hash(parent key, the block's token ids), so a key
// names the whole prefix through that block. The function is injectable (tests use a weak one).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvscope {

using TokenId = std::int32_t;
// key of the block holding `tokens` whose predecessor's key is `parent` (kRootKey for block 0)
using BlockHashFn = std::uint64_t (*)(std::uint64_t parent, std::span<const TokenId> tokens);

inline constexpr std::uint64_t kRootKey = 0x6b7673636f706521ULL;  // "kvscope!"

// A strong, fast 64-bit hash (multiply-xorshift mixing of two tokens per round). Not
// cryptographic: the index still confirms every key hit by comparing tokens.
std::uint64_t strong_block_hash(std::uint64_t parent, std::span<const TokenId> tokens);

// The chain keys (strong_block_hash from kRootKey) of every full block of `tokens`, in order:
// the keys a prefix cache with the default hash gives them. `out` is resized to the block count.
void chain_keys(std::span<const TokenId> tokens, int block_size, std::vector<std::uint64_t>& out);

}  // namespace kvscope

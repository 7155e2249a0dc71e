// The default block hash: 64-bit multiply-xorshift mixing, written for kvscope.
#include "engine/prefix/block_hash.h"

namespace kvscope {
namespace {

inline std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ULL;
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ULL;
  x ^= x >> 32;
  return x;
}

}  // namespace

std::uint64_t strong_block_hash(std::uint64_t parent, std::span<const TokenId> tokens) {
  std::uint64_t h = mix(parent ^ (0x9e3779b97f4a7c15ULL * (tokens.size() + 1)));
  std::size_t i = 0;
  for (; i + 1 < tokens.size(); i += 2) {
    const std::uint64_t pair =
        static_cast<std::uint32_t>(tokens[i]) |
        (static_cast<std::uint64_t>(static_cast<std::uint32_t>(tokens[i + 1])) << 32);
    h = (h ^ pair) * 0x9fb21c651e98df25ULL;
    h ^= h >> 29;
  }
  if (i < tokens.size()) h = (h ^ static_cast<std::uint32_t>(tokens[i])) * 0x9fb21c651e98df25ULL;
  return mix(h);
}

void chain_keys(std::span<const TokenId> tokens, int block_size, std::vector<std::uint64_t>& out) {
  const auto bs = static_cast<std::size_t>(block_size);
  out.resize(tokens.size() / bs);
  std::uint64_t key = kRootKey;
  for (std::size_t k = 0; k < out.size(); ++k) {
    key = strong_block_hash(key, tokens.subspan(k * bs, bs));
    out[k] = key;
  }
}

}  // namespace kvscope

// Strong integer ids used by the bookkeeping layers (blocks, sequences, requests).
#pragma once

#include <compare>
#include <cstdint>
#include <functional>

namespace kvscope {

template <typename Tag>
struct StrongId {
  std::int32_t value = 0;
  constexpr StrongId() = default;
  constexpr explicit StrongId(std::int32_t v) : value(v) {}
  constexpr auto operator<=>(const StrongId&) const = default;
};

struct BlockIdTag {};
struct SeqIdTag {};
using BlockId = StrongId<BlockIdTag>;  // a physical block in the pool
using SeqId = StrongId<SeqIdTag>;      // a sequence owning a block table

}  // namespace kvscope

template <typename Tag>
struct std::hash<kvscope::StrongId<Tag>> {
  std::size_t operator()(const kvscope::StrongId<Tag>& id) const noexcept {
    return std::hash<std::int32_t>()(id.value);
  }
};

// Why a prefix lookup did not serve every reusable block of a prompt, and how the reason (plus the
// step the missing block was evicted at) is packed into a PrefixLookup event's `b` field.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kvscope {

enum class MissReason : std::uint8_t {
  kNone = 0,              // every reusable block was served from the cache (a full hit)
  kFirstOccurrence = 1,   // nothing cached shares even the first token (hash chain: first block)
  kShorterThanBlock = 2,  // the prompt has no reusable full block (<= block_size tokens)
  kDiverged = 3,          // a cached prefix exists, the prompt departs from it at token N
  kEvicted = 4,           // the first missing block was cached earlier and evicted at step S
  kDisabled = 5,          // prefix caching is off for this run
};
inline constexpr int kNumMissReasons = 6;

std::string_view miss_reason_name(MissReason reason);
// Parses "first-occurrence", "diverged", ...; nullopt when unknown.
std::optional<MissReason> parse_miss_reason(std::string_view name);

// Event::b of a PrefixLookup: the reason in the low 8 bits, (evicted step + 1) above them
// (0 there means "no eviction step").
inline std::int64_t pack_miss(MissReason reason, std::int32_t evicted_at_step) {
  return static_cast<std::int64_t>(reason) |
         (static_cast<std::int64_t>(evicted_at_step < 0 ? 0 : evicted_at_step + 1) << 8);
}
inline MissReason unpack_miss_reason(std::int64_t b) {
  return static_cast<MissReason>(b & 0xff);
}
inline std::int32_t unpack_evicted_step(std::int64_t b) {
  return static_cast<std::int32_t>(b >> 8) - 1;  // -1 when none
}

}  // namespace kvscope

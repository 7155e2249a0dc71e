// Why a prefix lookup did not serve every reusable block of a prompt (a PrefixLookup event carries
// it: ev::PrefixLookup in engine/kv/event_payloads.h).
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

}  // namespace kvscope

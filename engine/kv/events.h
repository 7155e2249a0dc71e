// Typed events: everything the engine decides, stamped with the step. Flat and fixed-size so a
// timeline of millions of events stays compact, replays fast and serializes trivially.
#pragma once

#include <cstdint>
#include <string_view>

namespace kvscope {

enum class EventType : std::uint8_t {
  kRequestArrived,     // request; a = prompt tokens, b = max new tokens
  kAdmitted,           // request; a = blocks held after admission
  kPrefillChunk,       // request; a = first position, b = tokens in the chunk
  kDecodeToken,        // request; a = position, b = token id
  kBlockAllocated,     // request, block, logical
  kBlockFreed,         // request, block, logical (the request's reference dropped); a = 1 when
                       // token eviction removed it from inside the table (later blocks move
                       // down one logical index), else 0
  kBlockTableUpdated,  // request; a = blocks in table, b = tokens
  kPreempted,          // request; a = PreemptReason, b = tokens lost (to recompute)
  kSwappedOut,         // request; a = blocks moved to the host tier
  kSwappedIn,          // request; a = blocks moved back
  kRequestFinished,    // request; a = prompt tokens, b = generated tokens
  kRequestRejected,    // request; a = RejectReason, b = blocks it would need
  kStepEnd,            // a = running requests, b = waiting requests (metrics are in the Timeline)
  // Prefix sharing and cached blocks.
  kPrefixLookup,        // request; a = hit tokens, b = MissReason; logical = diverged-at token
  kBlockShared,         // request, block, logical; a = ref count after
  kBlockCopiedOnWrite,  // request, block = new copy, logical; a = source block
  kCachedBlockEvicted,  // block; a = request that cached it
  kBlockPinned,         // block
  // Token eviction.
  kTokensEvicted,  // request; a = tokens evicted, b = live tokens after
  kSlotMoved,      // request, block = destination; a = from slot, b = to slot (compaction)
  // Added later (values above are fixed: recordings store them).
  kBlockCached,      // request (that inserted it), block, logical; a = pool ref count after,
                     // b = the index's parent block + 1 (0: first block of a prefix, or a
                     // recording made before parents were recorded)
  kEvictedPosition,  // request; logical = the token evicted (its index in the request's
                     // sequence, 0 = first prompt token). One per token, after TokensEvicted.
  // KV tiers behind the prefix cache (engine/sched/kv_tier_store.h).
  kTierWritten,   // block (the cached block being written back); a = tier it was written to (0 =
                  // the first), -1 when the tier refused the write; b = its chain key (as int64)
  kTierReloaded,  // request, block (the pool block that received the bytes), logical; a = tier;
                  // b = its medium (0 = host RAM, 1 = disk)
  kTierHeld,      // at step end, one per tier: logical = tier; a = blocks held; b = capacity in
                  // blocks + kTierMediumUnit x medium (0 = host RAM, 1 = disk)
  kTierMoved,     // a block a tier passed down or lost: logical = from tier; a = to tier (-1:
                  // dropped off the last tier, or failed its check / a write); b = its chain key
};

// TierHeld's b packs the tier's capacity (under 2^40 blocks) and its medium.
inline constexpr std::int64_t kTierMediumUnit = std::int64_t{1} << 40;

enum class PreemptReason : std::int8_t { kRecompute = 0, kSwap = 1 };
enum class RejectReason : std::int8_t { kLargerThanPool = 0, kLargerThanContext = 1 };

struct Event {
  EventType type = EventType::kStepEnd;
  std::int32_t step = 0;
  std::int32_t request = -1;  // request (= sequence) id, -1 when none
  std::int32_t block = -1;    // physical block id, -1 when none
  std::int32_t logical = -1;  // logical block index (or token index, per type), -1 when none
  std::int64_t a = 0;         // type-specific, see EventType
  std::int64_t b = 0;         // type-specific, see EventType
  bool operator==(const Event&) const = default;
};

std::string_view event_type_name(EventType type);

// Anything that accepts events (the Timeline; a vector in tests).
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void emit(const Event& event) = 0;
};

}  // namespace kvscope

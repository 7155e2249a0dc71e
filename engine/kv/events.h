// Events: everything the engine decides, stamped with the step. The record is flat and fixed-size
// so a timeline of millions of events stays compact, replays fast and serializes trivially; each
// kind's meaning is its typed payload (engine/kv/event_payloads.h).
#pragma once

#include <cstdint>
#include <string_view>

namespace kvscope {

// What each kind carries is its payload struct in engine/kv/event_payloads.h (ev::RequestArrived
// for kRequestArrived, ...): build and read events through those, never through Event::a and b.
enum class EventType : std::uint8_t {
  kRequestArrived,
  kAdmitted,
  kPrefillChunk,
  kDecodeToken,
  kBlockAllocated,
  kBlockFreed,
  kBlockTableUpdated,
  kPreempted,
  kSwappedOut,
  kSwappedIn,
  kRequestFinished,
  kRequestRejected,
  kStepEnd,
  // Prefix sharing and cached blocks.
  kPrefixLookup,
  kBlockShared,
  kBlockCopiedOnWrite,
  kCachedBlockEvicted,
  kBlockPinned,
  // Token eviction.
  kTokensEvicted,
  kSlotMoved,
  // Added later (values above are fixed: recordings store them).
  kBlockCached,
  kEvictedPosition,
  // KV tiers behind the prefix cache (engine/tiers/kv_tier_store.h).
  kTierWritten,
  kTierReloaded,
  kTierHeld,
  kTierMoved,
  // Hybrid layer groups (engine/kv/layer_groups.h).
  kBlockGrouped,
};

enum class PreemptReason : std::int8_t { kRecompute = 0, kSwap = 1 };
enum class RejectReason : std::int8_t { kLargerThanPool = 0, kLargerThanContext = 1 };

struct Event {
  EventType type = EventType::kStepEnd;
  std::int32_t step = 0;
  std::int32_t request = -1;  // request (= sequence) id, -1 when none
  std::int32_t block = -1;    // physical block id, -1 when none
  std::int32_t logical = -1;  // logical block index (or token index, per type), -1 when none
  std::int64_t a = 0;         // type-specific: read and written by event_payloads.h only
  std::int64_t b = 0;         // type-specific: read and written by event_payloads.h only
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

// Event payloads: one struct per EventType with named fields, and the one codec between them and
// the flat Event record the Timeline keeps and recordings store (docs/recording-format.md).
//
// Producers build a payload and emit `to_event(payload, step)`; folds switch on Event::type and
// read `event_as<Payload>(e)`. Nothing else reads Event::a or Event::b. Where a kind needs more
// than the record's fields hold (PrefixLookup's reason and eviction step, TierHeld's capacity and
// medium), the packing lives in this header only: the record layout, and so every recording, is
// the one recordings have always had.
#pragma once

#include <cstdint>
#include <limits>
#include <tuple>
#include <type_traits>

#include "engine/kv/events.h"

namespace kvscope {

enum class MissReason : std::uint8_t;  // engine/prefix/miss_reason.h

// Where a KV tier keeps its blocks (engine/tiers/kv_tier_store.h); recordings store the value.
enum class TierMedium : std::uint8_t { kHost = 0, kDisk = 1 };

namespace ev {

// Where a payload field lives in the record.
enum class Slot : std::uint8_t { kRequest, kBlock, kLogical, kA, kB };

// One field's home: the member, its slot, and a bias added when stored (BlockCached's parent is
// stored + 1 so that 0 means "none" in recordings made before parents were recorded).
template <class P, class T>
struct Field {
  T P::*member;
  Slot slot;
  std::int64_t bias = 0;
};
template <class P, class T>
constexpr Field<P, T> at(T P::*member, Slot slot, std::int64_t bias = 0) {
  return {member, slot, bias};
}

using enum Slot;

struct RequestArrived {
  static constexpr EventType kType = EventType::kRequestArrived;
  std::int32_t request = -1;
  std::int64_t prompt_tokens = 0;
  std::int64_t max_new_tokens = 0;
  static constexpr auto fields() {
    return std::tuple{at(&RequestArrived::request, kRequest),
                      at(&RequestArrived::prompt_tokens, kA),
                      at(&RequestArrived::max_new_tokens, kB)};
  }
};

struct Admitted {
  static constexpr EventType kType = EventType::kAdmitted;
  std::int32_t request = -1;
  std::int64_t blocks_held = 0;  // after admission
  static constexpr auto fields() {
    return std::tuple{at(&Admitted::request, kRequest), at(&Admitted::blocks_held, kA)};
  }
};

struct PrefillChunk {
  static constexpr EventType kType = EventType::kPrefillChunk;
  std::int32_t request = -1;
  std::int64_t first_position = 0;
  std::int64_t tokens = 0;
  static constexpr auto fields() {
    return std::tuple{at(&PrefillChunk::request, kRequest), at(&PrefillChunk::first_position, kA),
                      at(&PrefillChunk::tokens, kB)};
  }
};

struct DecodeToken {
  static constexpr EventType kType = EventType::kDecodeToken;
  std::int32_t request = -1;
  std::int64_t position = 0;
  std::int64_t token = 0;  // the token id sampled
  static constexpr auto fields() {
    return std::tuple{at(&DecodeToken::request, kRequest), at(&DecodeToken::position, kA),
                      at(&DecodeToken::token, kB)};
  }
};

// From the simulator: a block joins a request's table at `logical`. From a live KV-event stream
// (no requests there): `logical` is the block's depth in its chain, and the stream's parent slot
// (-1: a root) and block size ride along; the simulator leaves both 0.
struct BlockAllocated {
  static constexpr EventType kType = EventType::kBlockAllocated;
  std::int32_t request = -1;
  std::int32_t block = -1;
  std::int32_t logical = -1;
  std::int64_t stream_parent = 0;
  std::int64_t stream_block_size = 0;
  static constexpr auto fields() {
    return std::tuple{at(&BlockAllocated::request, kRequest), at(&BlockAllocated::block, kBlock),
                      at(&BlockAllocated::logical, kLogical),
                      at(&BlockAllocated::stream_parent, kA),
                      at(&BlockAllocated::stream_block_size, kB)};
  }
};

// The request's reference dropped. `from_inside`: token eviction removed it from inside the table
// (later blocks move down one logical index).
struct BlockFreed {
  static constexpr EventType kType = EventType::kBlockFreed;
  std::int32_t request = -1;
  std::int32_t block = -1;
  std::int32_t logical = -1;
  bool from_inside = false;
  static constexpr auto fields() {
    return std::tuple{at(&BlockFreed::request, kRequest), at(&BlockFreed::block, kBlock),
                      at(&BlockFreed::logical, kLogical), at(&BlockFreed::from_inside, kA)};
  }
};

struct BlockTableUpdated {
  static constexpr EventType kType = EventType::kBlockTableUpdated;
  std::int32_t request = -1;
  std::int64_t blocks = 0;
  std::int64_t tokens = 0;
  static constexpr auto fields() {
    return std::tuple{at(&BlockTableUpdated::request, kRequest), at(&BlockTableUpdated::blocks, kA),
                      at(&BlockTableUpdated::tokens, kB)};
  }
};

struct Preempted {
  static constexpr EventType kType = EventType::kPreempted;
  std::int32_t request = -1;
  PreemptReason reason = PreemptReason::kRecompute;
  std::int64_t tokens_lost = 0;  // to recompute (0 for a swap)
  static constexpr auto fields() {
    return std::tuple{at(&Preempted::request, kRequest), at(&Preempted::reason, kA),
                      at(&Preempted::tokens_lost, kB)};
  }
};

struct SwappedOut {
  static constexpr EventType kType = EventType::kSwappedOut;
  std::int32_t request = -1;
  std::int64_t blocks = 0;  // moved to the host tier
  static constexpr auto fields() {
    return std::tuple{at(&SwappedOut::request, kRequest), at(&SwappedOut::blocks, kA)};
  }
};

struct SwappedIn {
  static constexpr EventType kType = EventType::kSwappedIn;
  std::int32_t request = -1;
  std::int64_t blocks = 0;  // moved back
  static constexpr auto fields() {
    return std::tuple{at(&SwappedIn::request, kRequest), at(&SwappedIn::blocks, kA)};
  }
};

struct RequestFinished {
  static constexpr EventType kType = EventType::kRequestFinished;
  std::int32_t request = -1;
  std::int64_t prompt_tokens = 0;
  std::int64_t generated_tokens = 0;
  static constexpr auto fields() {
    return std::tuple{at(&RequestFinished::request, kRequest),
                      at(&RequestFinished::prompt_tokens, kA),
                      at(&RequestFinished::generated_tokens, kB)};
  }
};

struct RequestRejected {
  static constexpr EventType kType = EventType::kRequestRejected;
  std::int32_t request = -1;
  RejectReason reason = RejectReason::kLargerThanPool;
  std::int64_t blocks_needed = 0;
  static constexpr auto fields() {
    return std::tuple{at(&RequestRejected::request, kRequest), at(&RequestRejected::reason, kA),
                      at(&RequestRejected::blocks_needed, kB)};
  }
};

struct StepEnd {  // the step's metrics are in the Timeline
  static constexpr EventType kType = EventType::kStepEnd;
  std::int64_t running = 0;
  std::int64_t waiting = 0;
  static constexpr auto fields() {
    return std::tuple{at(&StepEnd::running, kA), at(&StepEnd::waiting, kB)};
  }
};

// Stored as b = reason | (evicted_at_step + 1) << 8 (see the codec below).
struct PrefixLookup {
  static constexpr EventType kType = EventType::kPrefixLookup;
  std::int32_t request = -1;
  std::int32_t diverged_at = -1;  // the token the prompt departs from the cache at
  std::int64_t hit_tokens = 0;
  MissReason reason{};
  std::int32_t evicted_at_step = -1;  // kEvicted: when the first missing block went; else -1
};

struct BlockShared {
  static constexpr EventType kType = EventType::kBlockShared;
  std::int32_t request = -1;
  std::int32_t block = -1;
  std::int32_t logical = -1;
  std::int64_t ref_count = 0;  // after
  static constexpr auto fields() {
    return std::tuple{at(&BlockShared::request, kRequest), at(&BlockShared::block, kBlock),
                      at(&BlockShared::logical, kLogical), at(&BlockShared::ref_count, kA)};
  }
};

// The writer's table swaps the shared `source` for its private copy `block`.
struct BlockCopiedOnWrite {
  static constexpr EventType kType = EventType::kBlockCopiedOnWrite;
  std::int32_t request = -1;
  std::int32_t block = -1;
  std::int32_t logical = -1;
  std::int64_t source = -1;
  static constexpr auto fields() {
    return std::tuple{
        at(&BlockCopiedOnWrite::request, kRequest), at(&BlockCopiedOnWrite::block, kBlock),
        at(&BlockCopiedOnWrite::logical, kLogical), at(&BlockCopiedOnWrite::source, kA)};
  }
};

struct CachedBlockEvicted {
  static constexpr EventType kType = EventType::kCachedBlockEvicted;
  std::int32_t block = -1;
  std::int64_t cached_by = 0;  // the request that cached it (-1 from a live stream)
  static constexpr auto fields() {
    return std::tuple{at(&CachedBlockEvicted::block, kBlock),
                      at(&CachedBlockEvicted::cached_by, kA)};
  }
};

struct BlockPinned {
  static constexpr EventType kType = EventType::kBlockPinned;
  std::int32_t block = -1;
  static constexpr auto fields() { return std::tuple{at(&BlockPinned::block, kBlock)}; }
};

struct TokensEvicted {
  static constexpr EventType kType = EventType::kTokensEvicted;
  std::int32_t request = -1;
  std::int64_t evicted = 0;
  std::int64_t live_after = 0;
  static constexpr auto fields() {
    return std::tuple{at(&TokensEvicted::request, kRequest), at(&TokensEvicted::evicted, kA),
                      at(&TokensEvicted::live_after, kB)};
  }
};

// Compaction moved one token's K/V: `block` is the destination block.
struct SlotMoved {
  static constexpr EventType kType = EventType::kSlotMoved;
  std::int32_t request = -1;
  std::int32_t block = -1;
  std::int32_t logical = -1;
  std::int64_t from_slot = 0;
  std::int64_t to_slot = 0;
  static constexpr auto fields() {
    return std::tuple{at(&SlotMoved::request, kRequest), at(&SlotMoved::block, kBlock),
                      at(&SlotMoved::logical, kLogical), at(&SlotMoved::from_slot, kA),
                      at(&SlotMoved::to_slot, kB)};
  }
};

// `parent`: the prefix index's parent block, -1 for the first block of a prefix (and in
// recordings made before parents were recorded).
struct BlockCached {
  static constexpr EventType kType = EventType::kBlockCached;
  std::int32_t request = -1;  // that inserted it
  std::int32_t block = -1;
  std::int32_t logical = -1;
  std::int64_t ref_count = 0;  // the pool's, after
  std::int64_t parent = -1;
  static constexpr auto fields() {
    return std::tuple{at(&BlockCached::request, kRequest), at(&BlockCached::block, kBlock),
                      at(&BlockCached::logical, kLogical), at(&BlockCached::ref_count, kA),
                      at(&BlockCached::parent, kB, 1)};
  }
};

// One per evicted token, after TokensEvicted: `token` is its index in the request's sequence
// (0 = the first prompt token).
struct EvictedPosition {
  static constexpr EventType kType = EventType::kEvictedPosition;
  std::int32_t request = -1;
  std::int32_t token = -1;
  static constexpr auto fields() {
    return std::tuple{at(&EvictedPosition::request, kRequest),
                      at(&EvictedPosition::token, kLogical)};
  }
};

// A cached block written back to the first tier (`tier` 0), or refused (`tier` -1).
struct TierWritten {
  static constexpr EventType kType = EventType::kTierWritten;
  std::int32_t block = -1;
  std::int64_t tier = 0;
  std::uint64_t chain_key = 0;
  static constexpr auto fields() {
    return std::tuple{at(&TierWritten::block, kBlock), at(&TierWritten::tier, kA),
                      at(&TierWritten::chain_key, kB)};
  }
};

// A tier's bytes loaded into the pool block `block`, at the request's table index `logical`.
struct TierReloaded {
  static constexpr EventType kType = EventType::kTierReloaded;
  std::int32_t request = -1;
  std::int32_t block = -1;
  std::int32_t logical = -1;
  std::int64_t tier = 0;
  TierMedium medium = TierMedium::kHost;
  static constexpr auto fields() {
    return std::tuple{at(&TierReloaded::request, kRequest), at(&TierReloaded::block, kBlock),
                      at(&TierReloaded::logical, kLogical), at(&TierReloaded::tier, kA),
                      at(&TierReloaded::medium, kB)};
  }
};

// At step end, one per tier. Stored as logical = tier, a = held,
// b = capacity + medium x 2^40 (see the codec below).
struct TierHeld {
  static constexpr EventType kType = EventType::kTierHeld;
  std::int32_t tier = -1;
  std::int64_t blocks_held = 0;
  std::int64_t capacity_blocks = 0;  // under 2^40
  TierMedium medium = TierMedium::kHost;
};

// A block a tier passed down (`to_tier`) or lost (`to_tier` -1: dropped off the last tier, or
// failed its check or a write).
struct TierMoved {
  static constexpr EventType kType = EventType::kTierMoved;
  std::int32_t from_tier = -1;
  std::int64_t to_tier = -1;
  std::uint64_t chain_key = 0;
  static constexpr auto fields() {
    return std::tuple{at(&TierMoved::from_tier, kLogical), at(&TierMoved::to_tier, kA),
                      at(&TierMoved::chain_key, kB)};
  }
};

// A block just allocated (BlockAllocated before it) belongs to hybrid layer group `group` (a
// block without this event is group 0's, full attention unless an event said otherwise): its
// kind (0 full attention, 1 sliding window, 2 state) and the sliding window in tokens. The
// Simulator sends it for groups from 1 on; attach for a vLLM block of a group other than 0 or of
// another kind. Stored as logical = group, a = kind, b = window.
struct BlockGrouped {
  static constexpr EventType kType = EventType::kBlockGrouped;
  std::int32_t request = -1;
  std::int32_t block = -1;
  std::int32_t group = 0;
  std::int64_t kind = 0;
  std::int64_t window = 0;
  static constexpr auto fields() {
    return std::tuple{at(&BlockGrouped::request, kRequest), at(&BlockGrouped::block, kBlock),
                      at(&BlockGrouped::group, kLogical), at(&BlockGrouped::kind, kA),
                      at(&BlockGrouped::window, kB)};
  }
};

// ---- the codec ----

namespace detail {

constexpr std::int64_t get(const Event& e, Slot s) {
  switch (s) {
    case kRequest:
      return e.request;
    case kBlock:
      return e.block;
    case kLogical:
      return e.logical;
    case kA:
      return e.a;
    case kB:
      return e.b;
  }
  return 0;
}

constexpr void put(Event& e, Slot s, std::int64_t v) {
  switch (s) {
    case kRequest:
      e.request = static_cast<std::int32_t>(v);
      break;
    case kBlock:
      e.block = static_cast<std::int32_t>(v);
      break;
    case kLogical:
      e.logical = static_cast<std::int32_t>(v);
      break;
    case kA:
      e.a = v;
      break;
    case kB:
      e.b = v;
      break;
  }
}

// A stored value as the field's type. An enum value its type cannot hold (a damaged recording)
// reads as the enum's zero value.
template <class T>
constexpr T from_stored(std::int64_t v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v == 1;
  } else if constexpr (std::is_enum_v<T>) {
    using U = std::underlying_type_t<T>;
    const bool fits = v >= std::numeric_limits<U>::min() && v <= std::numeric_limits<U>::max();
    return fits ? static_cast<T>(v) : T{};
  } else {
    return static_cast<T>(v);
  }
}

// TierHeld's b: capacity + medium x kTierMediumUnit (capacity under 2^40).
inline constexpr std::int64_t kTierMediumUnit = std::int64_t{1} << 40;

}  // namespace detail

}  // namespace ev

// The record of a payload, stamped with `step`.
template <class P>
constexpr Event to_event(const P& p, std::int32_t step) {
  Event e;
  e.type = P::kType;
  e.step = step;
  std::apply(
      [&](const auto&... f) {
        (ev::detail::put(e, f.slot, static_cast<std::int64_t>(p.*f.member) + f.bias), ...);
      },
      P::fields());
  return e;
}

// The payload of a record of type P::kType (fields the record lacks keep their defaults).
template <class P>
constexpr P event_as(const Event& e) {
  P p;
  std::apply(
      [&](const auto&... f) {
        ((p.*f.member = ev::detail::from_stored<std::remove_cvref_t<decltype(p.*f.member)>>(
              ev::detail::get(e, f.slot) - f.bias)),
         ...);
      },
      P::fields());
  return p;
}

template <>
constexpr Event to_event(const ev::PrefixLookup& p, std::int32_t step) {
  Event e;
  e.type = ev::PrefixLookup::kType;
  e.step = step;
  e.request = p.request;
  e.logical = p.diverged_at;
  e.a = p.hit_tokens;
  e.b = static_cast<std::int64_t>(p.reason) |
        (static_cast<std::int64_t>(p.evicted_at_step < 0 ? 0 : p.evicted_at_step + 1) << 8);
  return e;
}

template <>
constexpr ev::PrefixLookup event_as(const Event& e) {
  ev::PrefixLookup p;
  p.request = e.request;
  p.diverged_at = e.logical;
  p.hit_tokens = e.a;
  p.reason = static_cast<MissReason>(e.b & 0xff);
  p.evicted_at_step = static_cast<std::int32_t>(e.b >> 8) - 1;
  return p;
}

template <>
constexpr Event to_event(const ev::TierHeld& p, std::int32_t step) {
  Event e;
  e.type = ev::TierHeld::kType;
  e.step = step;
  e.logical = p.tier;
  e.a = p.blocks_held;
  e.b = p.capacity_blocks + static_cast<std::int64_t>(p.medium) * ev::detail::kTierMediumUnit;
  return e;
}

template <>
constexpr ev::TierHeld event_as(const Event& e) {
  ev::TierHeld p;
  p.tier = e.logical;
  p.blocks_held = e.a;
  p.capacity_blocks = e.b % ev::detail::kTierMediumUnit;
  p.medium = e.b >= ev::detail::kTierMediumUnit ? TierMedium::kDisk : TierMedium::kHost;
  return p;
}

}  // namespace kvscope

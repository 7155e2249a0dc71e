// The event codec (engine/kv/event_payloads.h): every kind has a payload, payloads survive the
// record, and the record layout recordings store is pinned field by field (a recording made before
// the payloads existed must read the same).
#include "engine/kv/event_payloads.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "engine/prefix/miss_reason.h"

namespace kvscope {
namespace {

using AllPayloads =
    std::tuple<ev::RequestArrived, ev::Admitted, ev::PrefillChunk, ev::DecodeToken,
               ev::BlockAllocated, ev::BlockFreed, ev::BlockTableUpdated, ev::Preempted,
               ev::SwappedOut, ev::SwappedIn, ev::RequestFinished, ev::RequestRejected, ev::StepEnd,
               ev::PrefixLookup, ev::BlockShared, ev::BlockCopiedOnWrite, ev::CachedBlockEvicted,
               ev::BlockPinned, ev::TokensEvicted, ev::SlotMoved, ev::BlockCached,
               ev::EvictedPosition, ev::TierWritten, ev::TierReloaded, ev::TierHeld, ev::TierMoved,
               ev::BlockGrouped>;

TEST(EventPayloads, EveryEventTypeHasExactlyOnePayload) {
  std::set<int> types;
  std::apply([&](auto... p) { (types.insert(static_cast<int>(decltype(p)::kType)), ...); },
             AllPayloads{});
  EXPECT_EQ(types.size(), std::tuple_size_v<AllPayloads>);
  EXPECT_EQ(*types.begin(), 0);
  EXPECT_EQ(*types.rbegin(), static_cast<int>(EventType::kBlockGrouped));
}

TEST(EventPayloads, TheRecordLayoutIsTheOneRecordingsStore) {
  // Each expectation is the layout docs/recording-format.md and older recordings use.
  Event e = to_event(ev::RequestArrived{7, 12, 5}, 3);
  EXPECT_EQ(e, (Event{EventType::kRequestArrived, 3, 7, -1, -1, 12, 5}));
  e = to_event(ev::BlockFreed{2, 9, 4, /*from_inside=*/true}, 1);
  EXPECT_EQ(e, (Event{EventType::kBlockFreed, 1, 2, 9, 4, 1, 0}));
  e = to_event(ev::Preempted{2, PreemptReason::kSwap, 0}, 1);
  EXPECT_EQ(e, (Event{EventType::kPreempted, 1, 2, -1, -1, 1, 0}));
  e = to_event(ev::SlotMoved{1, 6, 3, 50, 49}, 8);
  EXPECT_EQ(e, (Event{EventType::kSlotMoved, 8, 1, 6, 3, 50, 49}));
  e = to_event(ev::EvictedPosition{4, 17}, 2);
  EXPECT_EQ(e, (Event{EventType::kEvictedPosition, 2, 4, -1, 17, 0, 0}));
  e = to_event(ev::CachedBlockEvicted{5, 3}, 0);
  EXPECT_EQ(e, (Event{EventType::kCachedBlockEvicted, 0, -1, 5, -1, 3, 0}));
  e = to_event(ev::TierMoved{0, -1, 0xfedcba9876543210ull}, 4);
  EXPECT_EQ(e, (Event{EventType::kTierMoved, 4, -1, -1, 0, -1,
                      static_cast<std::int64_t>(0xfedcba9876543210ull)}));
  e = to_event(ev::TierReloaded{1, 2, 3, 1, TierMedium::kDisk}, 4);
  EXPECT_EQ(e, (Event{EventType::kTierReloaded, 4, 1, 2, 3, 1, 1}));
  e = to_event(ev::BlockGrouped{3, 40, 1, 1, 128}, 6);
  EXPECT_EQ(e, (Event{EventType::kBlockGrouped, 6, 3, 40, 1, 1, 128}));
}

TEST(EventPayloads, PackedKindsKeepTheirStoredForm) {
  // BlockCached: parent + 1, so 0 is "no parent" (and what recordings before parents said).
  EXPECT_EQ(to_event(ev::BlockCached{1, 8, 2, 2, /*parent=*/5}, 0).b, 6);
  EXPECT_EQ(to_event(ev::BlockCached{1, 8, 0, 2, /*parent=*/-1}, 0).b, 0);
  EXPECT_EQ(event_as<ev::BlockCached>(Event{EventType::kBlockCached, 0, 1, 8, 2, 2, 0}).parent, -1);
  // PrefixLookup: the reason in the low byte, the eviction step + 1 above it.
  ev::PrefixLookup lookup{3, 40, 32, MissReason::kEvicted, 17};
  EXPECT_EQ(to_event(lookup, 0).b, 4 | (18 << 8));
  EXPECT_EQ(to_event(lookup, 0).logical, 40);
  lookup.reason = MissReason::kDiverged;
  lookup.evicted_at_step = -1;
  EXPECT_EQ(to_event(lookup, 0).b, 3);
  // TierHeld: capacity + medium x 2^40.
  ev::TierHeld held{1, 30, 64, TierMedium::kDisk};
  EXPECT_EQ(to_event(held, 0).b, 64 + (std::int64_t{1} << 40));
  EXPECT_EQ(to_event(held, 0).logical, 1);
  held.medium = TierMedium::kHost;
  EXPECT_EQ(to_event(held, 0).b, 64);
}

template <class P>
void expect_round_trip(const P& p) {
  const P back = event_as<P>(to_event(p, 9));
  EXPECT_EQ(to_event(back, 9), to_event(p, 9)) << event_type_name(P::kType);
}

TEST(EventPayloads, PayloadsSurviveTheRecord) {
  expect_round_trip(ev::PrefixLookup{3, 40, 32, MissReason::kEvicted, 17});
  expect_round_trip(ev::PrefixLookup{3, -1, 0, MissReason::kFirstOccurrence, -1});
  expect_round_trip(ev::TierHeld{2, 30, 64, TierMedium::kDisk});
  expect_round_trip(ev::BlockCached{1, 8, 2, 2, 5});
  expect_round_trip(ev::TierWritten{4, -1, 0xffffffffffffffffull});
  expect_round_trip(ev::RequestRejected{1, RejectReason::kLargerThanContext, 99});
  const auto lookup = event_as<ev::PrefixLookup>(
      to_event(ev::PrefixLookup{3, 40, 32, MissReason::kEvicted, 17}, 0));
  EXPECT_EQ(lookup.reason, MissReason::kEvicted);
  EXPECT_EQ(lookup.evicted_at_step, 17);
  EXPECT_EQ(lookup.hit_tokens, 32);
  const auto held = event_as<ev::TierHeld>(to_event(ev::TierHeld{2, 30, 64, TierMedium::kDisk}, 0));
  EXPECT_EQ(held.capacity_blocks, 64);
  EXPECT_EQ(held.medium, TierMedium::kDisk);
  EXPECT_EQ(event_as<ev::TierWritten>(to_event(ev::TierWritten{4, 0, 0xffffffffffffffffull}, 0))
                .chain_key,
            0xffffffffffffffffull);
}

TEST(EventPayloads, ADamagedRecordReadsAsTheSafeValue) {
  // An enum value its type cannot hold reads as the zero value (what the folds did before the
  // payloads: "a == 1 means swap", "b == 1 means disk").
  Event e{EventType::kPreempted, 0, 1, -1, -1, 257, 0};
  EXPECT_EQ(event_as<ev::Preempted>(e).reason, PreemptReason::kRecompute);
  e = Event{EventType::kTierReloaded, 0, 1, 2, 0, 0, 257};
  EXPECT_EQ(event_as<ev::TierReloaded>(e).medium, TierMedium::kHost);
  e = Event{EventType::kBlockFreed, 0, 1, 2, 0, 2, 0};
  EXPECT_FALSE(event_as<ev::BlockFreed>(e).from_inside);
}

}  // namespace
}  // namespace kvscope

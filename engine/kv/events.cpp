// Event type names (for reports, Chrome traces and the UI).
#include "engine/kv/events.h"

namespace kvscope {

std::string_view event_type_name(EventType type) {
  switch (type) {
    case EventType::kRequestArrived:
      return "RequestArrived";
    case EventType::kAdmitted:
      return "Admitted";
    case EventType::kPrefillChunk:
      return "PrefillChunk";
    case EventType::kDecodeToken:
      return "DecodeToken";
    case EventType::kBlockAllocated:
      return "BlockAllocated";
    case EventType::kBlockFreed:
      return "BlockFreed";
    case EventType::kBlockTableUpdated:
      return "BlockTableUpdated";
    case EventType::kPreempted:
      return "Preempted";
    case EventType::kSwappedOut:
      return "SwappedOut";
    case EventType::kSwappedIn:
      return "SwappedIn";
    case EventType::kRequestFinished:
      return "RequestFinished";
    case EventType::kRequestRejected:
      return "RequestRejected";
    case EventType::kStepEnd:
      return "StepEnd";
    case EventType::kPrefixLookup:
      return "PrefixLookup";
    case EventType::kBlockShared:
      return "BlockShared";
    case EventType::kBlockCopiedOnWrite:
      return "BlockCopiedOnWrite";
    case EventType::kCachedBlockEvicted:
      return "CachedBlockEvicted";
    case EventType::kBlockPinned:
      return "BlockPinned";
    case EventType::kTokensEvicted:
      return "TokensEvicted";
    case EventType::kSlotMoved:
      return "SlotMoved";
    case EventType::kBlockCached:
      return "BlockCached";
    case EventType::kEvictedPosition:
      return "EvictedPosition";
    case EventType::kTierWritten:
      return "TierWritten";
    case EventType::kTierReloaded:
      return "TierReloaded";
    case EventType::kTierHeld:
      return "TierHeld";
    case EventType::kTierMoved:
      return "TierMoved";
    case EventType::kBlockGrouped:
      return "BlockGrouped";
  }
  return "?";
}

}  // namespace kvscope

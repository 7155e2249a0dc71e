// Names of the prefix-lookup miss reasons (for reports, the UI and parsing).
#include "engine/prefix/miss_reason.h"

namespace kvscope {

std::string_view miss_reason_name(MissReason reason) {
  switch (reason) {
    case MissReason::kNone:
      return "hit";
    case MissReason::kFirstOccurrence:
      return "first-occurrence";
    case MissReason::kShorterThanBlock:
      return "shorter-than-block";
    case MissReason::kDiverged:
      return "diverged";
    case MissReason::kEvicted:
      return "evicted";
    case MissReason::kDisabled:
      return "disabled";
  }
  return "?";
}

std::optional<MissReason> parse_miss_reason(std::string_view name) {
  for (int i = 0; i < kNumMissReasons; ++i) {
    const auto r = static_cast<MissReason>(i);
    if (miss_reason_name(r) == name) return r;
  }
  return std::nullopt;
}

}  // namespace kvscope

// Names of the cached-block eviction policies.
#include "engine/prefix/eviction_policy.h"

namespace kvscope {

std::string_view eviction_policy_name(EvictionPolicyKind kind) {
  switch (kind) {
    case EvictionPolicyKind::kLru:
      return "lru";
    case EvictionPolicyKind::kLfu:
      return "lfu";
    case EvictionPolicyKind::kFifo:
      return "fifo";
  }
  return "?";
}

std::optional<EvictionPolicyKind> parse_eviction_policy(std::string_view name) {
  if (name == "lru") return EvictionPolicyKind::kLru;
  if (name == "lfu") return EvictionPolicyKind::kLfu;
  if (name == "fifo") return EvictionPolicyKind::kFifo;
  return std::nullopt;
}

}  // namespace kvscope

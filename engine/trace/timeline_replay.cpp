// Event replay onto a PoolState.
#include "engine/trace/timeline_replay.h"

#include <algorithm>
#include <string>

#include "engine/common/error.h"
#include "engine/kv/event_payloads.h"

namespace kvscope {
namespace {

BlockState& block_at(PoolState& s, const Event& e) {
  if (e.block < 0 || static_cast<std::size_t>(e.block) >= s.blocks.size()) {
    throw Error("timeline event " + std::string(event_type_name(e.type)) + " at step " +
                    std::to_string(e.step),
                "expected a block id in [0, " + std::to_string(s.blocks.size()) + "), got " +
                    std::to_string(e.block));
  }
  return s.blocks[static_cast<std::size_t>(e.block)];
}

// Recomputes `filled` of r's blocks with logical index in [first, last).
void refresh_filled(PoolState& s, const RequestState& r, int first, int last) {
  const int bs = s.block_size;
  last = std::min(last, static_cast<int>(r.blocks.size()));
  for (int l = std::max(0, first); l < last; ++l) {
    const std::int32_t b = r.blocks[static_cast<std::size_t>(l)];
    if (b < 0) continue;
    BlockState& bstate = s.blocks[static_cast<std::size_t>(b)];
    if (bstate.owner != r.id) continue;
    const int filled =
        bstate.cached ? bs : std::clamp(r.num_tokens - l * bs, 0, bs);  // cached: full
    bstate.filled = static_cast<std::int16_t>(filled);
  }
}

// A request's token count a + b from event fields, bounded so that the block arithmetic in
// set_tokens and refresh_filled cannot overflow int (a bad recording could say INT32_MIN).
std::int64_t token_count(const Event& e, std::int64_t a, std::int64_t b) {
  constexpr std::int64_t kMax = std::int64_t{1} << 30;
  if (a < 0 || a > kMax || b < 0 || b > kMax - a) {
    throw Error("timeline event " + std::string(event_type_name(e.type)) + " at step " +
                    std::to_string(e.step),
                "expected a token count in [0, 2^30], got " + std::to_string(a) + " + " +
                    std::to_string(b));
  }
  return a + b;
}

void set_tokens(PoolState& s, RequestState& r, std::int64_t tokens) {
  const int before = r.num_tokens;
  r.num_tokens = static_cast<std::int32_t>(tokens);
  const int bs = s.block_size;
  const int lo = std::min(before, r.num_tokens) / bs;
  const int hi = (std::max(before, r.num_tokens) + bs - 1) / bs + 1;
  refresh_filled(s, r, lo, hi);
}

void drop_block(PoolState& s, RequestState& r, const Event& e) {
  const bool inside = event_as<ev::BlockFreed>(e).from_inside;  // the table closes the gap
  if (inside && e.logical >= 0 && static_cast<std::size_t>(e.logical) < r.blocks.size() &&
      r.blocks[static_cast<std::size_t>(e.logical)] == e.block) {
    r.blocks.erase(r.blocks.begin() + e.logical);
    for (std::size_t l = static_cast<std::size_t>(e.logical); l < r.blocks.size(); ++l) {
      const std::int32_t b = r.blocks[l];
      if (b < 0 || static_cast<std::size_t>(b) >= s.blocks.size()) continue;
      BlockState& moved = s.blocks[static_cast<std::size_t>(b)];
      if (moved.owner == r.id) moved.logical = static_cast<std::int32_t>(l);
    }
    return;
  }
  if (e.logical >= 0 && static_cast<std::size_t>(e.logical) < r.blocks.size() &&
      r.blocks[static_cast<std::size_t>(e.logical)] == e.block) {
    r.blocks[static_cast<std::size_t>(e.logical)] = -1;
  }
  while (!r.blocks.empty() && r.blocks.back() < 0) r.blocks.pop_back();
}

// Sets status (and owner, when the owner let go) from the ref count and the cached flag.
void restatus(PoolState& s, BlockState& b, std::int32_t id) {
  const int holders = b.ref_count - (b.cached ? 1 : 0);
  if (holders <= 0) {
    if (!b.cached) {
      b = BlockState{};
      return;
    }
    b.owner = -1;
    if (b.status != BlockStatus::kPinned) b.status = BlockStatus::kCachedFree;
    return;
  }
  if (b.status != BlockStatus::kPinned)
    b.status = holders == 1 ? BlockStatus::kOwned : BlockStatus::kShared;
  bool owner_holds = false;
  for (const RequestState& r : s.requests) {
    if (r.id != b.owner) continue;
    owner_holds = std::find(r.blocks.begin(), r.blocks.end(), id) != r.blocks.end();
  }
  if (owner_holds) return;
  b.owner = -1;  // the owner let go: the first request (by id) still holding it takes over
  for (const RequestState& r : s.requests) {
    auto it = std::find(r.blocks.begin(), r.blocks.end(), id);
    if (it == r.blocks.end()) continue;
    b.owner = r.id;
    b.logical = static_cast<std::int32_t>(it - r.blocks.begin());
    return;
  }
}

void put_block(RequestState& r, const Event& e) {
  if (e.logical < 0) return;
  const auto l = static_cast<std::size_t>(e.logical);
  if (r.blocks.size() <= l) r.blocks.resize(l + 1, -1);
  r.blocks[l] = e.block;
}

// The block events: one block's state, and the table of the request (r, null when none) that
// holds it.
void apply_block_event(PoolState& s, RequestState* r, const Event& e) {
  switch (e.type) {
    case EventType::kBlockAllocated: {
      BlockState& b = block_at(s, e);
      b = BlockState{e.request, e.logical, 1, 0, BlockStatus::kOwned};
      if (r != nullptr) {
        put_block(*r, e);
        refresh_filled(s, *r, e.logical, e.logical + 1);
      }
      break;
    }
    case EventType::kBlockFreed: {
      BlockState& b = block_at(s, e);
      if (r != nullptr) drop_block(s, *r, e);
      --b.ref_count;
      restatus(s, b, e.block);
      break;
    }
    case EventType::kBlockShared: {
      BlockState& b = block_at(s, e);
      if (r != nullptr) put_block(*r, e);
      b.ref_count = static_cast<std::int16_t>(event_as<ev::BlockShared>(e).ref_count);
      if (b.owner < 0) {
        b.owner = e.request;
        b.logical = e.logical;
      }
      restatus(s, b, e.block);
      break;
    }
    case EventType::kBlockCached: {
      BlockState& b = block_at(s, e);
      b.ref_count = static_cast<std::int16_t>(event_as<ev::BlockCached>(e).ref_count);
      b.cached = true;
      b.filled = static_cast<std::int16_t>(s.block_size);
      restatus(s, b, e.block);
      break;
    }
    case EventType::kBlockCopiedOnWrite: {
      // The writer's table swaps the shared source for its private copy (e.block).
      const std::int64_t source = event_as<ev::BlockCopiedOnWrite>(e).source;
      if (source < 0 || source >= static_cast<std::int64_t>(s.blocks.size())) {
        throw Error("timeline event BlockCopiedOnWrite at step " + std::to_string(e.step),
                    "expected a source block id in [0, " + std::to_string(s.blocks.size()) +
                        "), got " + std::to_string(source));
      }
      BlockState& dst = block_at(s, e);
      dst = BlockState{e.request, e.logical, 1, 0, BlockStatus::kOwned};
      if (r != nullptr) {
        put_block(*r, e);
        refresh_filled(s, *r, e.logical, e.logical + 1);
      }
      BlockState& src = s.blocks[static_cast<std::size_t>(source)];
      --src.ref_count;
      restatus(s, src, static_cast<std::int32_t>(source));
      break;
    }
    case EventType::kCachedBlockEvicted:
      block_at(s, e) = BlockState{};
      break;
    case EventType::kBlockPinned:
      block_at(s, e).status = BlockStatus::kPinned;
      break;
    case EventType::kBlockGrouped: {
      const auto p = event_as<ev::BlockGrouped>(e);
      if (p.group < 0 || p.group > 127 || p.kind < 0 || p.kind > 2) {
        throw Error("timeline event BlockGrouped at step " + std::to_string(e.step),
                    "expected a group in [0, 127] of kind 0-2, got group " +
                        std::to_string(p.group) + " kind " + std::to_string(p.kind));
      }
      block_at(s, e).group = static_cast<std::int8_t>(p.group);
      if (s.groups.size() <= static_cast<std::size_t>(p.group)) s.groups.resize(p.group + 1);
      s.groups[static_cast<std::size_t>(p.group)] =
          LayerGroupSeen{static_cast<std::int8_t>(p.kind), static_cast<std::int32_t>(p.window)};
      break;
    }
    case EventType::kTierReloaded: {
      const auto p = event_as<ev::TierReloaded>(e);
      if (p.tier < 0 || p.tier >= 64) {
        throw Error("timeline event TierReloaded at step " + std::to_string(e.step),
                    "expected a tier index in [0, 64), got " + std::to_string(p.tier));
      }
      block_at(s, e).reloaded_from = p.medium == TierMedium::kDisk ? 1 : 0;
      break;
    }
    default:
      break;  // events that do not change block or request state
  }
}

}  // namespace

PoolState initial_pool_state(int num_blocks, int block_size) {
  PoolState s;
  s.step = -1;
  s.block_size = block_size;
  s.blocks.assign(static_cast<std::size_t>(num_blocks), BlockState{});
  return s;
}

RequestState& request_state(PoolState& state, std::int32_t id) {
  auto it = std::lower_bound(state.requests.begin(), state.requests.end(), id,
                             [](const RequestState& r, std::int32_t v) { return r.id < v; });
  if (it == state.requests.end() || it->id != id) {
    RequestState r;
    r.id = id;
    it = state.requests.insert(it, std::move(r));
  }
  return *it;
}

bool event_needs_request(EventType t) {
  switch (t) {
    case EventType::kRequestArrived:
    case EventType::kAdmitted:
    case EventType::kSwappedIn:
    case EventType::kSwappedOut:
    case EventType::kRequestRejected:
    case EventType::kRequestFinished:
    case EventType::kPreempted:
    case EventType::kPrefillChunk:
    case EventType::kDecodeToken:
    case EventType::kBlockTableUpdated:
      return true;
    default:
      return false;
  }
}

void apply_event(PoolState& s, const Event& e) {
  if (e.request < 0 && event_needs_request(e.type)) {
    throw Error("timeline event " + std::string(event_type_name(e.type)) + " at step " +
                    std::to_string(e.step),
                "expected a request id >= 0, got " + std::to_string(e.request));
  }
  RequestState* r = e.request >= 0 ? &request_state(s, e.request) : nullptr;
  switch (e.type) {
    case EventType::kRequestArrived:
      r->phase = RequestPhase::kWaiting;
      break;
    case EventType::kAdmitted:
      r->phase = RequestPhase::kRunning;
      break;
    case EventType::kSwappedIn:
      r->phase = RequestPhase::kRunning;
      break;
    case EventType::kSwappedOut:
      r->phase = RequestPhase::kSwapped;
      break;
    case EventType::kRequestRejected:
      r->phase = RequestPhase::kRejected;
      break;
    case EventType::kRequestFinished:
      r->phase = RequestPhase::kFinished;
      r->num_tokens = 0;
      break;
    case EventType::kPreempted:
      if (event_as<ev::Preempted>(e).reason == PreemptReason::kSwap) {
        r->phase = RequestPhase::kSwapped;
      } else {
        r->phase = RequestPhase::kWaiting;
        set_tokens(s, *r, 0);
      }
      break;
    case EventType::kPrefillChunk: {
      const auto p = event_as<ev::PrefillChunk>(e);
      set_tokens(s, *r, token_count(e, p.first_position, p.tokens));
      break;
    }
    case EventType::kDecodeToken:
      set_tokens(s, *r, token_count(e, event_as<ev::DecodeToken>(e).position, 1));
      break;
    case EventType::kBlockTableUpdated:
      set_tokens(s, *r, token_count(e, event_as<ev::BlockTableUpdated>(e).tokens, 0));
      break;
    default:
      apply_block_event(s, r, e);
      break;
  }
}

}  // namespace kvscope

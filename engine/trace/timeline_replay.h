// The replay rule: how each Event changes a PoolState. The Timeline's live state, its snapshots,
// state_at() and recording load all go through apply_event, so they cannot disagree.
#pragma once

#include "engine/kv/events.h"
#include "engine/trace/timeline.h"

namespace kvscope {

// All blocks free, no requests.
PoolState initial_pool_state(int num_blocks, int block_size);

// Applies one event. Token counts come from BlockTableUpdated (b), PrefillChunk (a + b) and
// DecodeToken (a + 1, a = position of the token fed); each block's `filled` follows its owner's
// token count. Throws kvscope::Error for a block id outside the pool.
void apply_event(PoolState& state, const Event& e);

// Whether events of this type must name a request (request >= 0).
bool event_needs_request(EventType type);

// The request with `id`, inserted (phase waiting) when not yet seen. Requests stay sorted by id.
RequestState& request_state(PoolState& state, std::int32_t id);

}  // namespace kvscope

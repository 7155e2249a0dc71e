// Decoded KV events built by hand for the block model's tests (kv_event_model_test.cpp,
// kv_lookup_test.cpp): what the decoder would hand KvEventModel, without msgpack.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/trace/kv_event_stream.h"

namespace kvscope::test {

inline KvStreamEvent removed(std::vector<std::uint64_t> hashes, std::string medium = "") {
  KvStreamEvent e;
  e.kind = KvEventKind::kBlockRemoved;
  e.block_hashes = std::move(hashes);
  e.medium = std::move(medium);
  return e;
}

inline KvStreamEvent cleared() {
  KvStreamEvent e;
  e.kind = KvEventKind::kAllBlocksCleared;
  return e;
}

inline KvEventBatch batch(double ts, std::vector<KvStreamEvent> events) {
  KvEventBatch b;
  b.ts = ts;
  b.events = std::move(events);
  return b;
}

}  // namespace kvscope::test

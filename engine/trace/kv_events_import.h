// Imports vLLM / SGLang KV-cache event logs (JSON lines: BlockStored, BlockRemoved,
// AllBlocksCleared, one event or one batch per line) as kvscope Events. The accepted format is
// specified in docs/concepts/prefix-caching.md; errors name the file, line, field and value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/kv/events.h"

namespace kvscope {

struct KvEventImport {
  std::vector<Event> events;  // when no sink was given
  std::int64_t lines = 0;     // non-blank lines read
  std::int64_t blocks_stored = 0;
  std::int64_t blocks_removed = 0;
  std::int64_t clears = 0;            // AllBlocksCleared events
  std::int64_t unknown_parents = 0;   // BlockStored whose parent hash this log never stored
  std::int64_t unknown_removals = 0;  // BlockRemoved of a hash not cached at that point
  std::int64_t cached_at_end = 0;
  std::int64_t peak_cached = 0;
  std::vector<std::string> hashes;  // dense block id -> the engine's hash, as written
};

// Each stored hash gets a dense block id (first appearance order; a re-stored hash keeps its id).
// Emitted: BlockStored -> one kBlockAllocated per block (block = id, logical = depth in its
// chain, a = parent id or -1, b = tokens in the block, request = -1); BlockRemoved and
// AllBlocksCleared -> kCachedBlockEvicted (block = id, a = -1), ascending ids for a clear.
// Event::step = the 0-based index of the line. Throws kvscope::Error on a bad line.
KvEventImport parse_kv_events(std::string_view text, const std::string& source,
                              EventSink* sink = nullptr);
KvEventImport load_kv_events(const std::string& path, EventSink* sink = nullptr);

}  // namespace kvscope

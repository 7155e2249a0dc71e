// vLLM/SGLang KV event import tests: chains, removals, clears, batches, line-numbered errors.
#include <gtest/gtest.h>

#include "engine/common/error.h"
#include "engine/trace/kv_events_import.h"

namespace kvscope {
namespace {

TEST(KvEventsImport, StoredRemovedClearedBecomeKvscopeEvents) {
  const char* log =
      R"({"type": "BlockStored", "block_hashes": [11, 12], "parent_block_hash": null, "token_ids": [1, 2, 3, 4], "block_size": 2}
{"type": "BlockStored", "block_hashes": ["c"], "parent_block_hash": 12, "token_ids": [5, 6], "block_size": 2, "lora_id": null}
{"ts": 1.5, "events": [{"type": "BlockRemoved", "block_hashes": ["c", 99]}, {"type": "BlockStored", "block_hashes": [13], "parent_block_hash": 777, "token_ids": [7, 8], "block_size": 2}]}

{"type": "AllBlocksCleared"}
)";
  const KvEventImport imp = parse_kv_events(log, "ev.jsonl");
  EXPECT_EQ(imp.lines, 4);
  EXPECT_EQ(imp.blocks_stored, 4);
  EXPECT_EQ(imp.blocks_removed, 1);
  EXPECT_EQ(imp.unknown_removals, 1);  // 99 was never stored
  EXPECT_EQ(imp.unknown_parents, 1);   // 777 was never stored
  EXPECT_EQ(imp.clears, 1);
  EXPECT_EQ(imp.peak_cached, 3);
  EXPECT_EQ(imp.cached_at_end, 0);
  EXPECT_EQ(imp.hashes, (std::vector<std::string>{"11", "12", "c", "13"}));
  const std::vector<Event> want = {
      {EventType::kBlockAllocated, 0, -1, 0, 0, -1, 2},  // 11: root of its chain
      {EventType::kBlockAllocated, 0, -1, 1, 1, 0, 2},   // 12: child of 11
      {EventType::kBlockAllocated, 1, -1, 2, 2, 1, 2},   // "c": child of 12, depth 2
      {EventType::kCachedBlockEvicted, 2, -1, 2, -1, -1, 0},
      {EventType::kBlockAllocated, 2, -1, 3, 0, -1, 2},  // 13: parent unknown
      {EventType::kCachedBlockEvicted, 3, -1, 0, -1, -1, 0},
      {EventType::kCachedBlockEvicted, 3, -1, 1, -1, -1, 0},
      {EventType::kCachedBlockEvicted, 3, -1, 3, -1, -1, 0},
  };
  EXPECT_EQ(imp.events, want);
}

std::string error_of(const std::string& text) {
  try {
    parse_kv_events(text, "ev.jsonl");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(KvEventsImport, ErrorsNameTheLine) {
  const std::string ok = R"({"type": "AllBlocksCleared"})";
  EXPECT_EQ(
      error_of(ok + "\n" + "garbage"),
      "ev.jsonl:2: expected a JSON object (one event or batch per line), got unparsable text");
  EXPECT_EQ(error_of(R"({"type": "BlockDropped"})"),
            "ev.jsonl:1: type: expected BlockStored, BlockRemoved or AllBlocksCleared, got "
            "\"BlockDropped\"");
  EXPECT_EQ(
      error_of(
          ok + "\n" + ok + "\n" +
          R"({"type": "BlockStored", "block_hashes": [1, 2], "token_ids": [1, 2, 3], "block_size": 2})"),
      "ev.jsonl:3: token_ids: expected 4 ids (block_hashes x block_size), got 3 ids");
  EXPECT_EQ(error_of(R"({"type": "BlockStored", "block_hashes": [1], "token_ids": [1]})"),
            "ev.jsonl:1: block_size: missing");
  EXPECT_EQ(error_of(R"({"events": [{"type": "BlockRemoved", "block_hashes": [1.5]}]})"),
            "ev.jsonl:1: events[0]: block_hashes[0]: expected a block hash (integer or non-empty "
            "string), got 1.5");
  EXPECT_THROW(load_kv_events("/nonexistent/ev.jsonl"), Error);
}

struct CountingSink : EventSink {
  int n = 0;
  void emit(const Event&) override { ++n; }
};

TEST(KvEventsImport, FeedsAnEventSink) {
  CountingSink sink;
  const KvEventImport imp = parse_kv_events(
      R"({"type": "BlockStored", "block_hashes": [1], "token_ids": [4], "block_size": 1})",
      "ev.jsonl", &sink);
  EXPECT_EQ(sink.n, 1);
  EXPECT_TRUE(imp.events.empty());
}

}  // namespace
}  // namespace kvscope

// Replays a fuzz_kv_events input: block_hashes x block_size overflowed int64 (signed overflow)
// for a huge block_size; now it is a line-numbered error on block_size.
#include <gtest/gtest.h>

#include <string>

#include "engine/common/error.h"
#include "engine/trace/kv_events_import.h"

namespace kvscope {
namespace {

TEST(FuzzRegression, KvEventsHugeBlockSizeIsAnError) {
  const std::string line =
      R"({"type":"BlockStored","block_hashes":[1,2],"token_ids":[],"block_size":4611686018427387904})";
  try {
    parse_kv_events(line + "\n", "ev.jsonl");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("ev.jsonl:1: block_size: expected at most 4611686018427387903 for 2 block"),
              std::string::npos)
        << msg;
  }
}

}  // namespace
}  // namespace kvscope

// The seeds of fuzz_kv_event_stream (tests/fuzz/corpus/kv_event_stream/, written by
// tests/fuzz/make_kv_event_stream_corpus.py) through the decoder in the ordinary build: the
// engine-layout seeds decode, the broken ones are refused with their reason, none crashes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "engine/trace/kv_event_stream.h"

namespace kvscope {
namespace {

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(KvEventStreamSeeds, EngineLayoutsDecodeAndBrokenSeedsAreRefused) {
  const std::filesystem::path dir =
      std::filesystem::path(KVSCOPE_SOURCE_DIR) / "tests/fuzz/corpus/kv_event_stream";
  // seed -> "" when it must decode, else a substring of its error
  const std::map<std::string, std::string> expected = {
      {"sglang_array.msgpack", ""},
      {"vllm_array_full.msgpack", ""},
      {"vllm_map_bytes.msgpack", ""},
      {"unknown_tag.msgpack", ""},
      {"float_hash.msgpack", "events[0]: block_hashes[0]: expected an integer or bytes hash"},
      {"missing_tokens.msgpack", "events[0]: token_ids: missing"},
      {"not_msgpack.bin", "not msgpack"},
      {"huge_array.bin", "expected at most one element per payload byte"},
  };
  for (const auto& [name, want] : expected) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(std::filesystem::exists(dir / name));
    KvEventBatch batch;
    std::string error;
    const bool ok = decode_kv_event_batch(read_all(dir / name), batch, error);
    if (want.empty()) {
      EXPECT_TRUE(ok) << error;
      EXPECT_FALSE(batch.events.empty());
    } else {
      EXPECT_FALSE(ok);
      EXPECT_NE(error.find(want), std::string::npos) << error;
    }
  }
  KvEventBatch b;
  std::string error;
  ASSERT_TRUE(decode_kv_event_batch(read_all(dir / "unknown_tag.msgpack"), b, error));
  EXPECT_EQ(b.skipped_events, 2);
  EXPECT_EQ(b.skipped_fields, 1);
}

}  // namespace
}  // namespace kvscope

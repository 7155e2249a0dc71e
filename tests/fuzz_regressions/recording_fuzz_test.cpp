// Replays fuzz_recording findings: a header claiming 251,658,240 blocks made Timeline::load
// allocate ~4 GB for the pool state, and a BlockAllocated event with logical index INT32_MAX made
// replay resize a block table to 8 GB, and a token count of 2^31 overflowed int in the replay's
// block arithmetic (UBSan). All three are now errors. Also: recordings holding BlockCached
// events (added to the enum after kSlotMoved) were rejected by load. And the seed corpus itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/trace/timeline.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

TEST(FuzzRegression, RecordingWithGiganticPoolIsRejected) {
  // The first 20 bytes of oom-9116276928: magic, version 1, num_blocks 0x0f000000, block_size 4
  // (load stops at num_blocks, so the rest of the input does not matter).
  const std::vector<char> bytes = {'K', 'V', 'S', 'C', 'O', 'P',  'E', 'R', 1, 0,
                                   0,   0,   0,   0,   0,   0x0f, 4,   0,   0, 0};
  const std::string path = test::temp_path("fuzz_gigantic_pool.kvr");
  test::write_bytes(path, bytes);
  try {
    Timeline::load(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("byte 12: expected num_blocks in [1, 50000000], got 251658240"),
              std::string::npos)
        << msg;
  }
}

// Rewrites the recording's trailing FNV-1a checksum after a patch.
void refresh_checksum(std::vector<char>& bytes) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i + 8 < bytes.size(); ++i)
    h = (h ^ static_cast<unsigned char>(bytes[i])) * 1099511628211ull;
  std::memcpy(bytes.data() + bytes.size() - 8, &h, 8);
}

TEST(FuzzRegression, RecordingWithHugeBlockTableIndexIsRejected) {
  // A valid one-event recording whose logical index is then patched to INT32_MAX, checksum
  // refreshed: the shape of oom-2c362fd0.
  Timeline t(TimelineHeader{4, 4, "t", "paged", "fp32", 1.0, true, nullptr});
  t.emit(Event{EventType::kBlockAllocated, 0, 0, 2, 3, 0, 0});
  t.end_step(StepMetrics{});
  const std::string path = test::temp_path("fuzz_huge_logical.kvr");
  t.save(path);
  std::vector<char> bytes = test::read_bytes(path);
  const char three[4] = {3, 0, 0, 0}, huge[4] = {'\xff', '\xff', '\xff', '\x7f'};
  auto it = std::search(bytes.begin(), bytes.end(), three, three + 4);  // the event's logical
  ASSERT_NE(it, bytes.end());
  std::copy(huge, huge + 4, it);
  refresh_checksum(bytes);
  test::write_bytes(path, bytes);
  try {
    Timeline::load(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("expected a block-table index in [-1, 4), got 2147483647"),
              std::string::npos)
        << msg;
  }
}

TEST(FuzzRegression, RecordingWithBlockCachedEventsLoads) {
  Timeline t(TimelineHeader{4, 4, "t", "paged", "fp32", 1.0, true, nullptr});
  t.emit(Event{EventType::kBlockAllocated, 0, 0, 1, 0, 0, 0});
  t.emit(Event{EventType::kBlockCached, 0, 0, 1, 0, 1, 0});
  t.end_step(StepMetrics{});
  const std::string path = test::temp_path("block_cached.kvr");
  t.save(path);
  const Timeline back = Timeline::load(path);
  ASSERT_EQ(back.num_events(), 2u);
  EXPECT_EQ(back.events()[1].type, EventType::kBlockCached);
}

TEST(FuzzRegression, RecordingWithTokenCountOverflowIsRejected) {
  // The shape of crash-44fe12e6: a request's token count of 2^31 (INT32_MIN once narrowed).
  Timeline t(TimelineHeader{4, 4, "t", "paged", "fp32", 1.0, true, nullptr});
  t.emit(Event{EventType::kBlockAllocated, 0, 0, 1, 0, 0, 0});
  t.emit(Event{EventType::kBlockTableUpdated, 0, 0, -1, -1, 1, 0x5a5a5a});
  t.end_step(StepMetrics{});
  const std::string path = test::temp_path("fuzz_token_overflow.kvr");
  t.save(path);
  std::vector<char> bytes = test::read_bytes(path);
  const char sentinel[3] = {0x5a, 0x5a, 0x5a}, big[4] = {0, 0, 0, '\x80'};
  auto it = std::search(bytes.begin(), bytes.end(), sentinel, sentinel + 3);  // event b
  ASSERT_NE(it, bytes.end());
  std::copy(big, big + 4, it);
  refresh_checksum(bytes);
  test::write_bytes(path, bytes);
  try {
    Timeline::load(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("expected a token count in [0, 2^30], got 2147483648 + 0"),
              std::string::npos)
        << msg;
  }
}

// The seeds of fuzz_recording (tests/fuzz/corpus/recording/, written by tests/fuzz/make_corpus.py)
// in the ordinary build: the recordings load (a version 1 one and one with token text among
// them), the broken copies are one-line errors naming the file and byte.
TEST(FuzzRegression, RecordingSeedsLoadOrAreRefused) {
  const std::string dir = std::string(KVSCOPE_SOURCE_DIR) + "/tests/fuzz/corpus/recording/";
  // seed -> "" when it must load, else a substring of its error
  const std::map<std::string, std::string> expected = {
      {"tiny.kvr", ""},
      {"tiny_swap.kvr", ""},
      {"tiny_text.kvr", ""},
      {"version1.kvr", ""},
      {"bad_magic.kvr", "byte 0: expected the magic"},
      {"truncated.kvr", "expected"},
      {"text_truncated.kvr", "expected"},
      {"version9.kvr", "byte 8: expected version 1 to 2"},
  };
  for (const auto& [name, want] : expected) {
    SCOPED_TRACE(name);
    if (want.empty()) {
      const Timeline t = Timeline::load(dir + name);
      EXPECT_GT(t.num_steps(), 0);
      EXPECT_EQ(t.header().text != nullptr, name == "tiny_text.kvr");
    } else {
      const std::string err = test::error_of([&] { Timeline::load(dir + name); });
      EXPECT_EQ(err.rfind(dir + name + ": byte ", 0), 0u) << err;
      EXPECT_NE(err.find(want), std::string::npos) << err;
    }
  }
}

}  // namespace
}  // namespace kvscope

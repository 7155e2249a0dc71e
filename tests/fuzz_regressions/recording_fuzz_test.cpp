// Replays a fuzz_recording finding: a recording header claiming 251,658,240 blocks made
// Timeline::load allocate ~4 GB for the pool state before reading any event; now num_blocks is
// bounded by the simulator's largest pool and such a file is a byte-offset error.
#include <gtest/gtest.h>

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
  const std::vector<char> bytes = {'K', 'V', 'S', 'C', 'O', 'P', 'E', 'R', 1, 0, 0, 0,
                                   0,   0,   0,   0x0f, 4,  0,   0,   0};
  const std::string path = testing::temp_path("fuzz_gigantic_pool.kvr");
  testing::write_bytes(path, bytes);
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

}  // namespace
}  // namespace kvscope

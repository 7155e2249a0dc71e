// Replays fuzz_mooncake findings: input_length near INT64_MAX overflowed the block-count ceil
// (signed overflow), and integers above INT64_MAX wrapped to negative lengths that passed.
#include <gtest/gtest.h>

#include <string>

#include "engine/common/error.h"
#include "engine/trace/mooncake.h"

namespace kvscope {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_mooncake_trace(text, "t.jsonl");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(FuzzRegression, MooncakeHugeInputLengthIsAnError) {
  const std::string err = error_of(
      R"({"timestamp": 1, "input_length": 9223372036854775807, "output_length": 1, "hash_ids": []})");
  EXPECT_NE(err.find("t.jsonl:1: hash_ids: expected 18014398509481984 ids"), std::string::npos)
      << err;
}

TEST(FuzzRegression, MooncakeLengthAboveInt64IsRejected) {
  // 2^64 - 1 used to become -1: zero hash ids matched, and a request of -1 tokens was accepted.
  const std::string err = error_of(
      R"({"timestamp": 0, "input_length": 18446744073709551615, "output_length": 0, "hash_ids": []})");
  EXPECT_NE(err.find("input_length: expected a non-negative integer, got 18446744073709551615"),
            std::string::npos)
      << err;
  EXPECT_NE(error_of(R"({"timestamp": 0, "input_length": 0, "output_length": 9223372036854775808,)"
                     R"( "hash_ids": []})")
                .find("output_length"),
            std::string::npos);
}

}  // namespace
}  // namespace kvscope

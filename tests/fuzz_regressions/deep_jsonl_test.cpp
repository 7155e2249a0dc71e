// Deeply nested JSON lines in the JSONL importers: 300,000 '[' used to overflow the stack when
// the error quoted the value (nlohmann's serializer recurses per level). Both loaders now bound
// nesting before parsing and say where the line got too deep.
#include <gtest/gtest.h>

#include <string>

#include "engine/common/error.h"
#include "engine/common/json_depth.h"
#include "engine/trace/kv_events_import.h"
#include "engine/trace/mooncake.h"

namespace kvscope {
namespace {

std::string deep_line(int depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

TEST(FuzzRegression, MooncakeDeepNestingIsAnErrorNotAStackOverflow) {
  try {
    parse_mooncake_trace(deep_line(300'000) + "\n", "t.jsonl");
    FAIL() << "must be an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "t.jsonl:1: expected a JSON object nested at most 64 deep, got deeper nesting at "
              "byte 64");
  }
}

TEST(FuzzRegression, KvEventsDeepNestingIsAnErrorNotAStackOverflow) {
  try {
    parse_kv_events(std::string(200'000, '{') + "\n", "e.jsonl");
    FAIL() << "must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("e.jsonl:1: expected JSON nested at most 64 deep"),
              std::string::npos)
        << e.what();
  }
}

TEST(JsonDepth, BracketsInsideStringsDoNotCount) {
  std::size_t at = 0;
  EXPECT_TRUE(json_nesting_within(R"({"a": "[[[[[[[[[[", "b": [[1]]})", 3, &at));
  EXPECT_FALSE(json_nesting_within(R"({"a": [[[1]]]})", 3, &at));
  EXPECT_EQ(at, 8u);  // the fourth opening bracket (the third "[")
  EXPECT_TRUE(json_nesting_within(R"(["\"[[[[[["])", 1, &at));  // escaped quote stays in the string
  EXPECT_TRUE(json_nesting_within(deep_line(64), 64, &at));
  EXPECT_FALSE(json_nesting_within(deep_line(65), 64, &at));
}

}  // namespace
}  // namespace kvscope

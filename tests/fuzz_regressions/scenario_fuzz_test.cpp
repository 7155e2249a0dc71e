// Replays fuzz_scenario findings: a number too large for a double made nlohmann::json throw
// out_of_range (not parse_error), which escaped the parser as a foreign exception; and a deeply
// nested document whose error quoting recursed once per level (a stack overflow at ~300K).
#include <gtest/gtest.h>

#include <string>

#include "engine/common/error.h"
#include "engine/scenario/scenario.h"

namespace kvscope {
namespace {

TEST(FuzzRegression, ScenarioNumberOverflowIsAnError) {
  // crash-256ce938 verbatim.
  const std::string text = "3333333e333333333333e3\"promp\n \"}]\x81";
  try {
    parse_scenario_text(text, "s.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("s.json: expected valid JSON"), std::string::npos) << msg;
    EXPECT_NE(msg.find("number overflow"), std::string::npos) << msg;
  }
}

// 300,000 '[' under a key whose value must be an object: the error quoted the value with a
// recursive dump. Now the nesting is checked before parsing, without recursion.
TEST(FuzzRegression, ScenarioDeepNestingIsAnErrorNotAStackOverflow) {
  for (const std::string& text :
       {std::string(300000, '['), R"({"format_version": 1, "cache": )" + std::string(300000, '['),
        R"({"title": ")" + std::string(1000, '[') + R"(", "x": )" + std::string(100000, '{')}) {
    try {
      parse_scenario_text(text, "s.json");
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("expected JSON nested at most 64 arrays/objects deep"),
                std::string::npos)
          << e.what();
    }
  }
  // Nesting at the limit is fine for the reader (the value is then rejected by type).
  const std::string at_limit =
      R"({"format_version": 1, "title": )" + std::string(63, '[') + std::string(63, ']') + "}";
  try {
    parse_scenario_text(at_limit, "s.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("s.json: title: expected a string, got [[[[", 0), 0u)
        << e.what();
  }
}

}  // namespace
}  // namespace kvscope

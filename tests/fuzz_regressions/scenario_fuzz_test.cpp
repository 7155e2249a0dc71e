// Replays a fuzz_scenario finding: a number too large for a double made nlohmann::json throw
// out_of_range (not parse_error), which escaped parse_min_scenario_text as a foreign exception.
#include <gtest/gtest.h>

#include <string>

#include "engine/common/error.h"
#include "engine/sched/scenario_min.h"

namespace kvscope {
namespace {

TEST(FuzzRegression, ScenarioNumberOverflowIsAnError) {
  // crash-256ce938 verbatim.
  const std::string text = "3333333e333333333333e3\"promp\n \"}]\x81";
  try {
    parse_min_scenario_text(text, "s.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("s.json: expected valid JSON"), std::string::npos) << msg;
    EXPECT_NE(msg.find("number overflow"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace kvscope

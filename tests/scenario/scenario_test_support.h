// Small helpers for scenario tests: a minimal valid document around a cache body, and the error
// text of a document that must not parse.
#pragma once

#include <string>

#include "engine/common/error.h"
#include "engine/scenario/scenario.h"

namespace kvscope::test {

// {"format_version": 1, "cache": {<cache>}, "workload": {"requests": <requests>}<extra>}
inline std::string scenario_json(
    const std::string& cache,
    const std::string& requests = R"([{"prompt_tokens": [1, 5], "max_new_tokens": 1}])",
    const std::string& extra = "") {
  return R"({"format_version": 1, "cache": {)" + cache + R"(}, "workload": {"requests": )" +
         requests + "}" + extra + "}";
}

// The error's message, or "" when the text parses.
inline std::string scenario_error(const std::string& text) {
  try {
    parse_scenario_text(text, "s.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace kvscope::test

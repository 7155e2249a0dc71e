// The one exception type kvscope's library code throws on bad input: it says where (file, JSON
// path or byte offset), what was wrong, and what was expected, in a single line.
#pragma once

#include <stdexcept>
#include <string>

namespace kvscope {

class Error : public std::runtime_error {
 public:
  // where: "models/x.bin", "scenarios/a.json: requests[3].prompt_tokens", ...
  // what:  "expected a positive integer, got -4"
  Error(std::string where, std::string what)
      : std::runtime_error(where.empty() ? what : where + ": " + what),
        where_(std::move(where)),
        what_(std::move(what)) {}

  const std::string& where() const { return where_; }
  const std::string& detail() const { return what_; }

 private:
  std::string where_;
  std::string what_;
};

// Builds "expected <expected>, got <got>" errors, the common shape.
[[noreturn]] inline void fail_expected(const std::string& where, const std::string& expected,
                                       const std::string& got) {
  throw Error(where, "expected " + expected + ", got " + got);
}

}  // namespace kvscope

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

// A broken internal invariant: a bug in kvscope, never the user's input. The CLI exits with
// kExitInternalError (not 2) and asks for a report; tests treat it as a failure.
class InternalError : public std::logic_error {
 public:
  InternalError(const std::string& where, const std::string& what)
      : std::logic_error(
            "internal error (a bug in kvscope; please report it with the command "
            "that triggered it): " +
            where + ": " + what) {}
};

// Process exit codes of the CLI: bad input is 2, a broken internal invariant 70 (sysexits'
// EX_SOFTWARE).
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitInternalError = 70;

// Builds "expected <expected>, got <got>" errors, the common shape.
[[noreturn]] inline void fail_expected(const std::string& where, const std::string& expected,
                                       const std::string& got) {
  throw Error(where, "expected " + expected + ", got " + got);
}

}  // namespace kvscope

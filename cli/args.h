// A small, strict command-line parser: --flag VALUE and --switch, positional arguments, and a
// clear error for anything unknown or malformed.
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kvscope::cli {

class Args {
 public:
  // `value_flags` take a value; `switches` do not. Throws kvscope::Error on unknown flags; with
  // `command` ("bench batch") the error says the flag does not apply to `kvscope <command>`.
  Args(const std::vector<std::string>& argv, const std::set<std::string>& value_flags,
       const std::set<std::string>& switches, const std::string& command = "");

  bool has(const std::string& flag) const {
    return values_.count(flag) != 0 || set_.count(flag) != 0;
  }
  std::string get(const std::string& flag, const std::string& fallback = "") const;
  int get_int(const std::string& flag, int fallback) const;
  long long get_i64(const std::string& flag, long long fallback) const;
  double get_double(const std::string& flag, double fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // Every flag and switch given, sorted.
  std::vector<std::string> given() const {
    std::vector<std::string> out(set_.begin(), set_.end());
    for (const auto& [flag, value] : values_) out.push_back(flag);
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> set_;
  std::vector<std::string> positional_;
};

// The items of a comma-separated list, as written ("a,,b" has an empty middle item).
std::vector<std::string> split_list(const std::string& text);

// A comma-separated list of integers, each in [lo, hi]; anything else (an empty item, a
// non-number, a value out of range) throws kvscope::Error naming `flag` with "expected
// <expected>, got '<item>'".
std::vector<int> parse_int_list(const std::string& text, const std::string& flag, long lo, long hi,
                                const std::string& expected);

}  // namespace kvscope::cli

// Args: strict flag parsing with did-you-mean hints.
#include "cli/args.h"

#include <algorithm>
#include <cmath>

#include "engine/common/error.h"

namespace kvscope::cli {
namespace {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

Args::Args(const std::vector<std::string>& argv, const std::set<std::string>& value_flags,
           const std::set<std::string>& switches, const std::string& command) {
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.size() > 2 && a.rfind("--", 0) == 0) {
      std::string flag = a, value;
      bool inline_value = false;
      if (auto eq = a.find('='); eq != std::string::npos) {
        flag = a.substr(0, eq);
        value = a.substr(eq + 1);
        inline_value = true;
      }
      if (value_flags.count(flag)) {
        if (!inline_value) {
          if (i + 1 >= argv.size()) throw Error(flag, "expected a value after it");
          value = argv[++i];
        }
        values_[flag] = value;
      } else if (switches.count(flag) && !inline_value) {
        set_.insert(flag);
      } else {
        std::string best;
        std::size_t best_d = 3;
        for (const auto* set : {&value_flags, &switches}) {
          for (const auto& f : *set) {
            std::size_t d = edit_distance(flag, f);
            if (d < best_d) {
              best_d = d;
              best = f;
            }
          }
        }
        std::string what =
            command.empty() ? "unknown option" : "does not apply to `kvscope " + command + "`";
        if (!best.empty()) what.append(" (did you mean ").append(best).append("?)");
        what.append("; see ").append(command.empty() ? "" : "kvscope ").append(command);
        what.append(command.empty() ? "--help" : " --help");
        throw Error(flag, what);
      }
    } else {
      positional_.push_back(a);
    }
  }
}

std::string Args::get(const std::string& flag, const std::string& fallback) const {
  auto it = values_.find(flag);
  return it == values_.end() ? fallback : it->second;
}

long long Args::get_i64(const std::string& flag, long long fallback) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return fallback;
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(it->second, &used);
  } catch (...) {
    used = 0;
  }
  if (used == 0 || used != it->second.size())
    fail_expected(flag, "an integer", "'" + it->second + "'");
  return v;
}

int Args::get_int(const std::string& flag, int fallback) const {
  long long v = get_i64(flag, fallback);
  if (v < -(1LL << 31) || v >= (1LL << 31))
    fail_expected(flag, "a 32-bit integer", std::to_string(v));
  return static_cast<int>(v);
}

double Args::get_double(const std::string& flag, double fallback) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return fallback;
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(it->second, &used);
  } catch (...) {
    used = 0;
  }
  if (used == 0 || used != it->second.size() || !std::isfinite(v)) {
    fail_expected(flag, "a number", "'" + it->second + "'");
  }
  return v;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    out.push_back(text.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

std::vector<int> parse_int_list(const std::string& text, const std::string& flag, long lo, long hi,
                                const std::string& expected) {
  std::vector<int> out;
  for (const std::string& item : split_list(text)) {
    std::size_t used = 0;
    long v = 0;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < lo || v > hi)
      fail_expected(flag, expected, "'" + item + "'");
    out.push_back(static_cast<int>(v));
  }
  return out;
}

}  // namespace kvscope::cli

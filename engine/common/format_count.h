// "327,680": an integer with its thousands separated by commas (reports, CLI tables, the
// layer-group plan's notes).
#pragma once

#include <cstdint>
#include <string>

namespace kvscope {

inline std::string format_count(std::int64_t value) {
  const std::string digits =
      std::to_string(value < 0 ? -static_cast<unsigned long long>(value) : value);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

}  // namespace kvscope

// Reading line-oriented text files (JSONL traces, event logs): the whole file, and its lines with
// their 1-based numbers, trailing '\r' removed and blank lines skipped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvscope {

// The file's bytes; throws kvscope::Error(path, cannot_open_message) when it cannot be opened.
std::string read_text_file(const std::string& path, const std::string& cannot_open_message);

// Calls fn(line_number, line) for every line holding a character outside `blank`.
template <typename Fn>
void for_each_nonblank_line(std::string_view text, Fn&& fn, std::string_view blank = " \t") {
  std::int64_t line_no = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(blank) == std::string_view::npos) continue;
    fn(line_no, line);
  }
}

}  // namespace kvscope

// See backend_flag.h.
#include "cli/backend_flag.h"

#include <initializer_list>

namespace kvscope::cli {

namespace {

// The column where a help line's description starts: after the flag and its gap, or, for a
// continuation line, after its indentation (0 when there is none).
std::size_t description_column(const std::string& line) {
  std::size_t at = 0;
  if (line.rfind("  --", 0) == 0) at = line.find("  ", 2);
  if (at == std::string::npos) return 0;
  const std::size_t text = line.find_first_not_of(' ', at);
  return text == std::string::npos ? 0 : text;
}

// "  FLAG" then the description lines (each at most 63 characters) from `column`; the first on
// the flag's line when it fits there.
std::string help_entry(const std::string& flag, std::initializer_list<const char*> lines,
                       std::size_t column) {
  std::string out = "  " + flag;
  bool first = true;
  for (const char* l : lines) {
    if (first && out.size() + 2 <= column) {
      out.append(column - out.size(), ' ');
    } else {
      out += "\n";
      out.append(column, ' ');
    }
    out += l;
    first = false;
  }
  return out;
}

}  // namespace

std::string with_backend_help(const char* help) {
  std::string s = help;
  const std::string mark = "%BACKEND%";
  const std::size_t at = s.find(mark);
  if (at == std::string::npos) return s;
  // The description column of the line before the mark, so the entries line up with it.
  const std::size_t line_start = at >= 2 ? s.rfind('\n', at - 2) : std::string::npos;
  const std::size_t from = line_start == std::string::npos ? 0 : line_start + 1;
  std::size_t column = at > from ? description_column(s.substr(from, at - 1 - from)) : 0;
  if (column < 29) column = 29;
  const std::string text =
      help_entry("--backend auto|cpu|cuda|cuda-sim",
                 {"what runs the forward pass (default auto: a CUDA GPU when",
                  "there is one and it covers the run, else the CPU); cuda-sim:",
                  "the CUDA backend on the emulated device (slow; docs/kernels.md)"},
                 column) +
      "\n" +
      help_entry("--device-weights f32|f16|bf16",
                 {"the CUDA backends' cuBLAS GEMM weights (default f16; fp32", "accumulation)"},
                 column);
  s.replace(at, mark.size(), text);
  return s;
}

}  // namespace kvscope::cli

// Number formatting for terminal output: 327,680 and "40.00 GiB (42.95 GB)".
#pragma once

#include <cstdint>
#include <string>

namespace kvscope::cli {

std::string with_commas(std::int64_t value);
// Binary units with the decimal figure beside it, so GB vs GiB is never ambiguous.
std::string human_bytes(double bytes);
// "97% on huge pages" for a fraction in [0, 1]; "huge pages: unknown" when negative.
std::string huge_page_text(double fraction);

}  // namespace kvscope::cli

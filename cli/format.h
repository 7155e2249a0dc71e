// Terminal output helpers: number formatting (327,680 and "40.00 GiB (42.95 GB)"); the progress
// line of long jobs is cli/progress.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "engine/common/config.h"

namespace kvscope::cli {

std::string with_commas(std::int64_t value);
// Binary units with the decimal figure beside it, so GB vs GiB is never ambiguous.
std::string human_bytes(double bytes);
// "97% on huge pages" for a fraction in [0, 1]; "huge pages: unknown" when negative.
std::string huge_page_text(double fraction);

// "MHA", "MQA" or "GQA": how the shape's KV heads relate to its query heads.
const char* attention_kind(const ModelConfig& c);

// Creates the --out directory (and its parents); throws kvscope::Error naming it when that fails.
std::filesystem::path checked_out_dir(const std::string& out_dir);

}  // namespace kvscope::cli

// Terminal output helpers: number formatting (327,680 and "40.00 GiB (42.95 GB)") and the
// progress line long evaluations draw on stderr.
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

// A one-line progress bar on stderr for one task, "label [####......]  42% (done/total)", drawn
// only when stderr is a terminal (logs and pipes stay clean) and erased when it goes out of
// scope, so the next line or bar starts on a clean line. Pass it where a ProgressFn is taken:
// [&](long d, long t) { bar(d, t); }. Redraws only when the percentage changes.
class ProgressLine {
 public:
  explicit ProgressLine(std::string label);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  void operator()(long done, long total);

 private:
  std::string label_;
  bool enabled_;
  bool shown_ = false;
  int last_percent_ = -1;
};

}  // namespace kvscope::cli

// PyTorch's SDPA as a second baseline for `kvscope bench attention` (scripts/sdpa_bench.py): the
// script times torch.nn.functional.scaled_dot_product_attention on the GPU at the benchmark's
// shape and prints JSON, which this parses. Torch missing or without a CUDA device is not an
// error: the result then says why there is no baseline.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace kvscope::cli {

struct SdpaRow {
  int batch = 0;
  int context = 0;
  double ms = 0.0;
  double kv_gb_per_s = 0.0;
  std::string gqa;    // "native" (enable_gqa) or "repeated" (K/V repeated per query head)
  std::string error;  // set instead of the times when the row did not run ("out of memory")
};

struct SdpaResult {
  bool available = false;
  std::string reason;  // when not available
  std::string torch, device;
  std::vector<SdpaRow> rows;
};

// sdpa_bench.py's stdout. Throws kvscope::Error naming `script` when it is not the script's JSON.
SdpaResult parse_sdpa_output(const std::string& text, const std::string& script);

// Runs `python3 script --batch .. --contexts .. --repeat ..` and parses what it prints; a script
// that cannot be run or exits non-zero gives available = false with the reason.
SdpaResult run_sdpa(const std::string& script, const std::vector<int>& batches,
                    const std::vector<int>& contexts, int repeat);

// scripts/sdpa_bench.py of the source tree this binary was built from.
std::string sdpa_script();

// kvscope's fp16 figures at one (context, batch): its contiguous pass and the device copy.
struct Fp16Figures {
  double ms = 0.0;
  double copy_gb_per_s = 0.0;
};

// SDPA's rows as bench attention reports them, against kvscope's fp16 rows of the same
// (context, batch) when there are some: JSON objects appended to `rows` (format "sdpa-fp16",
// "of_copy", "kvscope_fp16_time_over_sdpa") and table lines appended to `text`.
void append_sdpa_rows(const SdpaResult& r, const std::map<std::pair<int, int>, Fp16Figures>& fp16,
                      nlohmann::json& rows, std::string& text);

}  // namespace kvscope::cli

// libFuzzer target: the Mooncake JSONL trace parser (strict and --skip-bad), then the reuse
// figure and synthetic prompts of what it accepted. Bad lines must end in kvscope::Error;
// accepted requests must satisfy the documented shape.
#include <cstdint>
#include <string_view>

#include "engine/common/error.h"
#include "engine/trace/mooncake.h"
#include "tests/fuzz/fuzz_support.h"

using kvscope::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  kvscope::MooncakeLoadOptions options;
  options.skip_bad = (data[0] & 1) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const kvscope::MooncakeTrace trace = kvscope::parse_mooncake_trace(text, "fuzz", options);
    std::vector<kvscope::TokenId> tokens;
    for (const kvscope::MooncakeRequest& r : trace.requests) {
      check(r.timestamp_ms >= 0, "timestamp non-negative");
      check(r.input_length >= 0 && r.output_length >= 0, "lengths non-negative");
      const std::int64_t blocks =
          (r.input_length + kvscope::kMooncakeBlockTokens - 1) / kvscope::kMooncakeBlockTokens;
      check(static_cast<std::int64_t>(r.hash_ids.size()) == blocks, "one hash id per block");
      kvscope::mooncake_prompt_tokens(r, tokens, 512);
      check(static_cast<std::int64_t>(tokens.size()) == r.input_length, "prompt length");
    }
    const double ratio = kvscope::mooncake_hash_id_reuse_ratio(trace.requests);
    check(ratio >= 0.0 && ratio <= 1.0, "reuse ratio in [0, 1]");
  } catch (const kvscope::Error&) {
    return 0;
  }
  return 0;
}

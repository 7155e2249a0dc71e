// Mooncake request traces (FAST'25): one JSON object per line with timestamp (ms), input_length,
// output_length and hash_ids (one id per 512-token prompt block). Loading validates every line;
// hash ids become synthetic token blocks so token-level prefix indexes can replay the trace.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/prefix/block_hash.h"

namespace kvscope {

inline constexpr int kMooncakeBlockTokens = 512;

struct MooncakeRequest {
  double timestamp_ms = 0.0;
  std::int64_t input_length = 0;       // prompt tokens
  std::int64_t output_length = 0;      // generated tokens
  std::vector<std::int64_t> hash_ids;  // [ceil(input_length / 512)]
  std::int32_t line = 0;               // 1-based line in the file
};

struct MooncakeLoadOptions {
  bool skip_bad = false;  // count and skip bad lines instead of throwing on the first
};

struct MooncakeTrace {
  std::string source;
  std::vector<MooncakeRequest> requests;    // in file order
  std::int64_t skipped_lines = 0;           // bad lines skipped (skip_bad)
  std::vector<std::string> skipped_errors;  // the first few of their errors
};

// Throws kvscope::Error "<file>:<line>: <field>: expected ..., got ..." on the first bad line
// unless skip_bad. Blank lines are ignored.
MooncakeTrace parse_mooncake_trace(std::string_view text, const std::string& source,
                                   const MooncakeLoadOptions& options = {});
MooncakeTrace load_mooncake_trace(const std::string& path, const MooncakeLoadOptions& options = {});

// The synthetic prompt of a request: trace block k (hash id h) becomes 512 pseudo-random token
// ids in [1, vocab) drawn from a generator seeded by h alone, so equal hash ids give equal token
// blocks and different ids give different ones (first token equal with probability 1/vocab).
// The last block is cut to input_length. `out` is resized to input_length.
void mooncake_prompt_tokens(const MooncakeRequest& request, std::vector<TokenId>& out,
                            int vocab = 32000);

// The trace's own reuse figure, from hash ids alone: a block counts as reused when it and every
// block before it appeared in an earlier request; reused tokens = min(reused blocks * 512,
// input_length). Unlimited capacity, no timing. Returns reused tokens / prompt tokens.
double mooncake_hash_id_reuse_ratio(std::span<const MooncakeRequest> requests);

}  // namespace kvscope

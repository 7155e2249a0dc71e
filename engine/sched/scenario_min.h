// The minimal scenario format read by `kvscope run` (to be replaced by the full scenario format;
// everything about it lives in this file pair):
//   {"title": "...", "model": "path or name" (optional),
//    "cache": {"block_size", "num_blocks" | "pool_bytes", "allocator": "paged"|"contiguous",
//              "preemption": "recompute"|"swap", "victim": "last_admitted"|"longest"|
//              "lowest_priority", "host_blocks", "max_seq_len", "kv_dtype",
//              "prefix_caching": bool, "prefix_index": "hash"|"radix",
//              "cached_block_eviction": "lru"|"lfu"|"fifo"},
//    "sampler": {"temperature", "top_p", "seed"} (optional; default greedy),
//    "scheduler": {"max_tokens_per_step", "max_running"},
//    "requests": [{"arrival_step", "prompt" (text) | "prompt_tokens" (ids), "max_new_tokens",
//                  "priority", "n" (parallel samples, default 1)}]}
// Unknown keys are errors; every error names the file, the JSON path, the value and what was
// expected.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/model/config.h"
#include "engine/model/tokenizer.h"
#include "engine/sched/sim_config.h"

namespace kvscope {

struct MinScenarioRequest {
  int arrival_step = 0;
  std::optional<std::string> prompt;  // text, tokenized with BOS when the model is known
  std::vector<int> prompt_tokens;     // ids, fed as given
  int max_new_tokens = 1;
  int priority = 0;
  int n_samples = 1;
};

struct MinScenario {
  std::string path;
  std::string model;                       // "" = the default model
  SimConfig config;                        // num_blocks = 0 when pool_bytes is given
  std::optional<std::int64_t> pool_bytes;  // device pool size in bytes (rounded down to blocks)
  std::vector<MinScenarioRequest> requests;
};

// Throws kvscope::Error ("file: json.path: expected ..., got ...") on any problem.
MinScenario parse_min_scenario(const std::string& path);
MinScenario parse_min_scenario_text(const std::string& text, const std::string& path);

// Turns pool_bytes into num_blocks for this model shape; throws when the pool holds no block.
SimConfig resolve_sim_config(const MinScenario& s, const ModelConfig& shape);
// Tokenizes text prompts (`tokenizer` may be null when every request gives prompt_tokens).
std::vector<SimRequest> resolve_requests(const MinScenario& s, const Tokenizer* tokenizer);

}  // namespace kvscope

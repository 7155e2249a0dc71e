// Resolving one scenario variant for the Simulator: pool size, what it cannot run yet, requests.
#include <algorithm>
#include <filesystem>

#include "engine/common/error.h"
#include "engine/kv/kv_storage.h"
#include "engine/scenario/scenario.h"

namespace kvscope {

ResolvedRun resolve_scenario(const Scenario& s, const std::string& variant,
                             const ModelConfig& shape, const Tokenizer* tokenizer) {
  const CacheSettings& c = s.variant(variant);
  // Parsed and validated, but the Simulator does not run these yet: say so instead of ignoring.
  if (c.token_eviction.kind != EvictionKind::kNone) {
    fail_expected(s.path + ": " + c.token_eviction_at,
                  "\"policy\": \"none\" (token eviction is not supported by the Simulator yet)",
                  "policy " + eviction_kind_name(c.token_eviction.kind));
  }
  if (c.mla) {
    fail_expected(s.path + ": " + c.mla_at,
                  "no \"mla\" (MLA is not supported by the Simulator yet)",
                  "rank " + std::to_string(c.mla->rank) + ", mode " + mla_mode_name(c.mla->mode));
  }
  ResolvedRun run;
  SimConfig& cfg = run.config;
  cfg = c.sim;
  cfg.title = s.title;
  cfg.max_tokens_per_step = s.max_tokens_per_step;
  cfg.max_running = s.max_running;
  cfg.sampler = s.sampler;
  const std::string at = variant.empty() || variant == "base" ? "cache" : "compare." + variant;
  if (c.pool_bytes) {
    const KvLayout layout{shape.n_layers, shape.n_kv_heads, shape.head_dim(), cfg.block_size, 1,
                          cfg.k_format,   cfg.v_format};
    const auto block_bytes = static_cast<std::int64_t>(layout.block_bytes());
    const std::int64_t blocks = *c.pool_bytes / block_bytes;
    if (blocks < 1 || blocks > 50'000'000) {
      fail_expected(s.path + ": " + at + ".pool_bytes",
                    "between 1 and 50,000,000 blocks of " + std::to_string(block_bytes) + " bytes",
                    std::to_string(*c.pool_bytes) + " (" + std::to_string(blocks) + " blocks)");
    }
    cfg.num_blocks = static_cast<int>(blocks);
  }
  if (cfg.max_seq_len > shape.seq_len) {
    fail_expected(s.path + ": " + at + ".max_seq_len",
                  "at most the model context " + std::to_string(shape.seq_len),
                  std::to_string(cfg.max_seq_len));
  }
  const std::string dir = std::filesystem::path(s.path).parent_path().string();
  run.requests = expand_workload(s.workload, s.path, dir, shape.vocab_size, tokenizer);
  return run;
}

}  // namespace kvscope

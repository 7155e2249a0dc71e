// RunInfo: what a scenario run was started with (the resolved SimConfig, the policy override on
// top of the scenario file, the model and each sequence's prompt), for the panels that re-run
// parts of it: controls, compare, attention capture. Recordings and demo data have none.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/model/checkpoint.h"
#include "engine/model/tokenizer.h"
#include "engine/prefix/prefix_index.h"
#include "engine/scenario/scenario.h"
#include "engine/sched/sim_config.h"

namespace kvscope::ui {

// Policy settings the Controls panel changes; each unset field keeps the scenario's value.
struct PolicyOverride {
  std::string
      variant;  // one of the scenario's `compare` variants as the starting point ("" = base)
  std::optional<int> block_size;
  std::optional<KvFormat> k_format;
  std::optional<KvFormat> v_format;
  std::optional<bool> prefix_caching;
  std::optional<IndexKind> prefix_index;
  std::optional<std::int64_t> pool_bytes;  // device pool in bytes (replaces num_blocks)
  std::optional<AllocatorKind> allocator;
  std::optional<PreemptionMode> preemption;
  std::optional<EvictionKind> eviction;  // token eviction policy (kNone: off)
  std::optional<int> eviction_budget;    // tokens each query attends to
  // KV tiers behind the prefix cache: blocks of the host (RAM) and disk tier, 0 = none. Setting
  // either rebuilds cache.tiers as host then disk (a disk tier in the system's temp directory).
  std::optional<int> host_tier_blocks;
  std::optional<int> disk_tier_blocks;
  // What runs the forward pass: "cuda-sim" (the CUDA backend on the emulated device) or "cuda"
  // (on a GPU); unset: the CPU (kernels/backend/backend_select.h).
  std::optional<std::string> backend;

  bool empty() const {
    return variant.empty() && !block_size && !k_format && !v_format && !prefix_caching &&
           !prefix_index && !pool_bytes && !allocator && !preemption && !eviction &&
           !eviction_budget && !host_tier_blocks && !disk_tier_blocks && !backend;
  }
  // One line, e.g. "block 8, K int8, prefix off" ("scenario defaults" when empty).
  std::string describe() const;
  bool operator==(const PolicyOverride&) const = default;
};

struct RunInfo {
  std::string scenario_path;
  std::string title;  // the scenario's title and description
  std::string description;
  std::vector<Caption> captions;      // presenter captions, ascending steps
  std::vector<std::string> variants;  // "base", then the scenario's compare variants
  SimConfig scenario_config;          // as the scenario file resolves it
  SimConfig config;                   // what the Simulator runs (override applied)
  PolicyOverride override;
  std::int64_t pool_bytes = 0;                   // config.num_blocks x exact bytes per block
  std::int64_t scenario_pool_bytes = 0;          // the same for scenario_config
  std::optional<std::int64_t> pool_bytes_field;  // the scenario's pool_bytes or pool_tokens' bytes
  ModelConfig shape;                             // the model's shape
  std::string model_source;                      // checkpoint path or synthetic spec
  std::string model_name;      // short display name of the model run (model_display_name)
  std::string scenario_model;  // the scenario's own "model" argument ("" = the default model)
  std::string model_override;  // the model chosen instead (Controls panel; "" = the scenario's)
  bool random_weights = false;
  // How the forward pass reads the weights ("Q4_1 x210, ...: quantized matmuls (native, avx2)");
  // empty for bookkeeping-only runs.
  std::string weights_text;
  // What runs the forward pass ("CPU", or the CUDA backend's name); empty for bookkeeping runs.
  std::string backend_name;
  std::shared_ptr<const Model> model;  // null for bookkeeping-only runs
  std::shared_ptr<const Tokenizer> tokenizer;
  std::vector<std::vector<int>> prompts;  // [sequence id] prompt token ids
};

// The scenario's config with the override's cache fields applied (pool_bytes aside).
// Blocks of `medium` across the config's KV tiers (0 when it has none).
int tier_blocks(const SimConfig& c, TierMedium medium);
SimConfig with_override(SimConfig base, const PolicyOverride& o);

// Blocks the pool holds for `config` under `policy`: pool bytes (the override's, else the
// scenario's cache.pool_bytes) / bytes per block, else the scenario's num_blocks.
std::int64_t pool_blocks(const RunInfo& info, const SimConfig& config,
                         const PolicyOverride& policy);

// A short display name for a model argument or checkpoint path: "" -> the default model's file
// stem, a short name (named_models()) or path -> the file stem without a GGUF quantization tag
// ("SmolLM2-135M-Instruct" for SmolLM2-135M-Instruct.Q4_1.gguf), "synthetic:<spec>" as given.
std::string model_display_name(const std::string& model_arg);

// Exact bytes of one block (all layers, K and V) for a configuration on a model shape.
std::int64_t block_bytes(const ModelConfig& shape, const SimConfig& config);

}  // namespace kvscope::ui

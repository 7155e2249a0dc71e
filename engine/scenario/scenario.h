// The scenario format (docs/scenario-format.md): one JSON file that `kvscope run` and kvscope-ui
// run identically. parse_scenario* validates the whole file (every compare variant included) into
// plain structs; resolve_scenario turns one variant into the Simulator's SimConfig + requests.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/common/config.h"
#include "engine/evict/policy.h"
#include "engine/evict/token_evictor.h"
#include "engine/mla/mla_codec.h"
#include "engine/model/checkpoint.h"
#include "engine/model/tokenizer.h"
#include "engine/scenario/workload.h"
#include "engine/sched/disagg_options.h"
#include "engine/sched/sim_config.h"

namespace kvscope {

inline constexpr int kScenarioFormatVersion = 1;

// MLA: K/V replaced by a low-rank latent of `rank` values per token and layer.
struct CacheSettings {
  SimConfig sim;  // block size, pool in blocks, formats, allocator, prefix caching, preemption...
  std::optional<std::int64_t> pool_bytes;  // device pool in bytes; sim.num_blocks is then unused
  // Base cache only: the pool holds this many tokens in the base's block size and format (whole
  // blocks) on the run's model; the bytes that come to are every variant's budget.
  std::optional<std::int64_t> pool_tokens;
  EvictorOptions token_eviction;          // policy.kind kNone = dense (every token kept)
  std::optional<MlaOptions> mla;          // absent = ordinary K/V
  std::string token_eviction_at, mla_at;  // JSON paths they were set at (for errors)
  std::string sparse_at, blend_at;        // ... and sim.sparse_attention's and sim.blend's
  // Disaggregated prefill/decode (kvscope disagg; engine/sched/disagg.h); absent: colocated.
  std::optional<DisaggOptions> disaggregation;
};

struct ScenarioModel {
  std::string arg;           // "" = the default model, a checkpoint path/name, "synthetic:<spec>"
  bool bookkeeping = false;  // no forward pass: block accounting only (tokens are 0)
};

// What a caption sets when a presenter reaches it (PageDown, `kvscope-ui --caption N`): the
// workspace, the attention panel's layer and head or its sink grid, and whether the run pauses
// there. Unset fields leave the view as it is.
struct CaptionView {
  std::optional<std::string>
      workspace;  // "pool", "prefix", "attention", "compare", "live", "kernel", "serving"
  std::optional<int> layer, head;  // the attention panel's layer and head
  std::optional<bool> sink_grid;   // the attention panel's layer x head grid
  bool pause = false;              // playing stops when the run reaches this step
  // The variant the run plays ("base" or a `compare` name; the UI re-runs the scenario on it) and
  // the one the Compare panel runs beside it. Both hold for the later captions until one changes
  // them, so a talk stepped backwards shows each caption on the run it was written for.
  std::optional<std::string> variant, compare;
  std::optional<std::string> compare_tab;  // the Compare panel's tab: "memory" or "text"
};

struct Caption {
  int step = 0;
  std::string text;
  CaptionView view;
};

struct Scenario {
  std::string path;
  int format_version = kScenarioFormatVersion;
  std::string title;
  std::string description;
  ScenarioModel model;
  CacheSettings cache;          // the base variant
  int max_tokens_per_step = 0;  // scheduler: per-step token budget; 0 = unlimited
  int max_running = 0;          // scheduler: cap on running requests; 0 = unlimited
  SamplerConfig sampler;
  Workload workload;
  std::optional<int> steps;       // run length in steps; absent = until every request is done
  std::vector<Caption> captions;  // ascending steps
  // Named variants: the base cache with the variant's overrides applied, in file order.
  std::vector<std::pair<std::string, CacheSettings>> compare;

  // The cache of a variant ("" or "base" = the base); throws naming the known variants.
  const CacheSettings& variant(const std::string& name) const;
  std::vector<std::string> variant_names() const;  // "base" first, then compare's names
};

// Throws kvscope::Error ("file: json.path: expected ..., got ...") on any problem.
Scenario parse_scenario(const std::string& path);
Scenario parse_scenario_text(const std::string& text, const std::string& path);

// What the Simulator runs for one variant.
struct ResolvedRun {
  SimConfig config;  // config.mla is still null: attach_mla builds it from the weights
  std::vector<SimRequest> requests;
  std::optional<MlaOptions> mla;                // the variant's latent cache, if any
  std::optional<DisaggOptions> disaggregation;  // the variant's prefill/decode split, if any
};

// Builds the MLA codec (SVD of the loaded weights) into run.config when the variant has one;
// throws naming `where` when the run has no weights to factorize (bookkeeping only).
void attach_mla(ResolvedRun& run, const std::shared_ptr<const Model>& weights,
                const std::string& where);

// A variant's pool budget in bytes on `shape`: its pool_bytes, or the bytes the base cache's
// pool_tokens come to (whole blocks of the base's block size and format); none for num_blocks.
std::optional<std::int64_t> scenario_pool_bytes(const Scenario& s, const std::string& variant,
                                                const ModelConfig& shape);

// Resolves a variant against the model's shape: pool bytes or tokens -> blocks, the workload ->
// token prompts (`tokenizer` may be null when no request has text), the Mooncake trace loaded.
// Throws naming the field for what the Simulator cannot run yet (token eviction, MLA).
ResolvedRun resolve_scenario(const Scenario& s, const std::string& variant,
                             const ModelConfig& shape, const Tokenizer* tokenizer);

// The model a scenario runs on. With bookkeeping (the scenario's or the caller's) there are no
// weights: a synthetic model's shape is read without allocating its weights.
struct ScenarioModelLoad {
  ModelConfig shape;
  std::shared_ptr<const Model> weights;        // null = bookkeeping only
  std::shared_ptr<const Tokenizer> tokenizer;  // null when none matches the vocabulary
  bool random_weights = false;                 // a synthetic model (label its results)
  std::string source;  // the checkpoint path, or "synthetic:... (random weights)"
};
// `model_override` ("" = the scenario's model) is the command line's --model; `format` how a GGUF
// model's matmuls read its weights (--weight-format).
ScenarioModelLoad load_scenario_model(const Scenario& s, const std::string& model_override,
                                      bool bookkeeping,
                                      WeightFormat format = WeightFormat::kNative);

// The keys the parser accepts at the top level and in "cache" (the JSON Schema test pins them).
std::vector<std::string> scenario_top_level_keys();
std::vector<std::string> scenario_cache_keys();

}  // namespace kvscope

// Resolving one scenario variant for the Simulator: pool size, what it cannot run yet, requests.
#include <algorithm>
#include <filesystem>

#include "engine/common/error.h"
#include "engine/common/setting_source.h"
#include "engine/kv/kv_storage.h"
#include "engine/kv/layer_groups.h"
#include "engine/scenario/scenario.h"

namespace kvscope {

namespace {

// The layer-group plan of `c` on `shape` (its layer_groups must be set).
LayerGroupPlan groups_plan(const CacheSettings& c, const ModelConfig& shape,
                           const std::string& where) {
  const SimConfig& cfg = c.sim;
  return plan_layer_groups_for(cfg.layer_groups, shape, cfg.k_format, cfg.v_format, cfg.block_size,
                               where);
}

// Bytes of one block of `c` (its block size, K/V formats or MLA latent) on `shape`.
std::int64_t block_bytes_of(const CacheSettings& c, const ModelConfig& shape) {
  const SimConfig& cfg = c.sim;
  if (!cfg.layer_groups.empty()) return groups_plan(c, shape, "cache.layer_groups").block_bytes();
  const KvLayout layout = c.mla
                              ? mla_layout_for(shape, *c.mla, cfg.block_size, 1, cfg.k_format)
                              : kv_layout_for(shape, cfg.block_size, 1, cfg.k_format, cfg.v_format);
  return static_cast<std::int64_t>(layout.block_bytes());
}

}  // namespace

std::optional<std::int64_t> scenario_pool_bytes(const Scenario& s, const std::string& variant,
                                                const ModelConfig& shape) {
  const CacheSettings& c = s.variant(variant);
  if (c.pool_bytes) return c.pool_bytes;
  if (!c.pool_tokens) return std::nullopt;
  const std::int64_t block = s.cache.sim.block_size;
  return (*c.pool_tokens + block - 1) / block * block_bytes_of(s.cache, shape);
}

ResolvedRun resolve_scenario(const Scenario& s, const std::string& variant,
                             const ModelConfig& shape, const Tokenizer* tokenizer) {
  const CacheSettings& c = s.variant(variant);
  ResolvedRun run;
  SimConfig& cfg = run.config;
  cfg = c.sim;
  cfg.token_eviction = c.token_eviction;
  cfg.title = s.title;
  cfg.max_tokens_per_step = s.max_tokens_per_step;
  cfg.max_running = s.max_running;
  cfg.sampler = s.sampler;
  const std::string at = variant.empty() || variant == "base" ? "cache" : "compare." + variant;
  // A caption's view names a layer and head of this model (the attention panel opens them).
  for (std::size_t i = 0; i < s.captions.size(); ++i) {
    const CaptionView& v = s.captions[i].view;
    const std::string where = s.path + ": captions[" + std::to_string(i) + "].view.";
    if (v.layer && *v.layer >= shape.n_layers) {
      fail_expected(where + "layer",
                    "a layer of this model, 0 to " + std::to_string(shape.n_layers - 1),
                    std::to_string(*v.layer));
    }
    if (v.head && *v.head >= shape.n_heads) {
      fail_expected(where + "head",
                    "a head of this model, 0 to " + std::to_string(shape.n_heads - 1),
                    std::to_string(*v.head));
    }
  }
  if (cfg.sparse_attention) {
    SparseOptions& o = *cfg.sparse_attention;
    const std::string sparse_at = s.path + ": " + c.sparse_at;
    if (o.proxy_dims == 0) {  // the default: a quarter of a head (even, for the proxy's pairs)
      o.proxy_dims = std::max(1, shape.head_dim() / 4);
      if (o.selector == SelectorKind::kProxy) o.proxy_dims = std::max(2, o.proxy_dims / 2 * 2);
    }
    check_sparse_attention(o, c.mla.has_value(), cfg.evicts_tokens(), shape, cfg.block_size,
                           sparse_at);
  }
  if (cfg.blend) {
    const std::string blend_at = s.path + ": " + c.blend_at;
    if (c.mla) {
      fail_expected(blend_at,
                    "none of prefix caching, token eviction, MLA, sparse attention, tiers, KIVI or "
                    "swap preemption beside it",
                    "cache.mla");
    }
    check_blend(cfg, shape, blend_at);
  }
  run.mla = c.mla;
  run.disaggregation = c.disaggregation;
  if (c.mla) {
    // The latent rows live in the K format's encoding (see mla_layout_for).
    if (!(cfg.k_format == cfg.v_format)) {
      fail_expected(s.path + ": " + c.mla_at,
                    "one KV format for the latent cache (k_dtype == v_dtype)",
                    cfg.k_format.name() + " / " + cfg.v_format.name());
    }
    // The conversion's own rules on this shape, before any weights load.
    const std::string mla_at = s.path + ": " + c.mla_at;
    with_setting_sources({{kMlaRank, mla_at + ".rank"}, {kMlaRopeDims, mla_at + ".rope_dims"}},
                         [&] { validate(*c.mla, shape); });
  }
  if (!cfg.layer_groups.empty()) {
    // The attention block grows when a state page would not fit it (vLLM's rule).
    const LayerGroupPlan plan = groups_plan(c, shape, s.path + ": " + at + ".layer_groups");
    cfg.block_size = plan.block_size;
  }
  if (const auto budget = scenario_pool_bytes(s, variant, shape)) {
    const std::int64_t block_bytes = block_bytes_of(c, shape);
    const std::int64_t blocks = *budget / block_bytes;
    if (blocks < 1 || blocks > 50'000'000) {
      const std::string given = c.pool_bytes
                                    ? std::to_string(*budget)
                                    : std::to_string(*budget) + " bytes (cache.pool_tokens " +
                                          std::to_string(*c.pool_tokens) + ")";
      fail_expected(s.path + ": " + at + (c.pool_bytes ? ".pool_bytes" : ".pool_tokens"),
                    "between 1 and 50,000,000 blocks of " + std::to_string(block_bytes) + " bytes",
                    given + " (" + std::to_string(blocks) + " blocks)");
    }
    cfg.num_blocks = static_cast<int>(blocks);
  }
  if (cfg.max_seq_len > shape.seq_len) {
    fail_expected(s.path + ": " + at + ".max_seq_len",
                  "at most the model context " + std::to_string(shape.seq_len),
                  std::to_string(cfg.max_seq_len));
  }
  if (tokenizer != nullptr) {
    cfg.stop_tokens.clear();
    for (int t = 0; t < tokenizer->vocab_size(); ++t) {
      if (tokenizer->is_stop(t)) cfg.stop_tokens.push_back(t);
    }
  }
  const std::string dir = std::filesystem::path(s.path).parent_path().string();
  run.requests = expand_workload(s.workload, s.path, dir, shape.vocab_size, tokenizer);
  return run;
}

void attach_mla(ResolvedRun& run, const std::shared_ptr<const Model>& weights,
                const std::string& where) {
  if (!run.mla) return;
  if (!weights) {
    fail_expected(where + ": cache.mla", "a model with weights to factorize (not bookkeeping only)",
                  "rank " + std::to_string(run.mla->rank) + " on a shape without weights");
  }
  run.config.mla = std::make_shared<const MlaCodec>(make_mla_codec(*weights, *run.mla));
}

}  // namespace kvscope

// Token eviction as a CacheVariant: `kvscope eval evict` runs each window through a paged cache
// with a TokenEvictor and compares next-token distributions with the exact fp32 cache. Also the
// per-sequence run used by generation past the trained context (engine/evict + AttentionRecorder).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/analysis/quality.h"
#include "engine/evict/attention_stats.h"
#include "engine/evict/token_evictor.h"

namespace kvscope {

struct EvictionRunOptions {
  EvictorOptions evictor;
  KvFormat k_format;  // fp32 by default: the loss measured is eviction's alone
  KvFormat v_format;
  int block_size = 16;
  // 0: streaming, every policy evicts after each token, using only queries already computed.
  // > 0: compress-then-continue (kvpress): the first `context` tokens are prefilled densely and
  // compressed once to the budget; then the continuation runs. SnapKV is one-shot: it never
  // compresses again (its cache grows); the other policies keep evicting after each token.
  int context = 0;
  // Optional: also records every query's attention as the evicted cache saw it (keys by their
  // original token index; an evicted key receives nothing), e.g. for the UI's heatmap.
  AttentionRecorder* capture = nullptr;
};

// What an eviction variant did over every window it ran.
struct EvictionRunStats {
  std::size_t peak_kv_bytes = 0;  // most block bytes one sequence held at once (all layers, K+V)
  int peak_blocks = 0;
  long tokens_evicted = 0;
  long blocks_freed = 0;
  long slots_moved = 0;
  long keys_rotated = 0;
  double mean_attended = 0.0;  // mean live tokens each query attended to (itself included)
  long queries = 0;
  // Per window: the most block bytes held at once; summed over windows, with their tokens.
  double window_peak_bytes_sum = 0.0;
  long window_tokens = 0;
  // KV bytes held per token of context: sum over windows of each window's peak block bytes (all
  // layers, K+V, whole blocks) divided by the tokens of those windows. The full cache gives its
  // bytes per token rounded up to whole blocks per window.
  double peak_bytes_per_context_token() const {
    return window_tokens > 0 ? window_peak_bytes_sum / static_cast<double>(window_tokens) : 0.0;
  }
};

class EvictionVariant final : public CacheVariant {
 public:
  explicit EvictionVariant(const EvictionRunOptions& options);
  std::string name() const override;
  CacheFootprint footprint(const ModelConfig& c) const override;
  // One window alone: its stepper, one position per engine step.
  void run(Transformer& t, const std::vector<int>& window,
           const std::function<void(int, std::span<const float>)>& on_logits) override;
  bool has_stepper() const override { return true; }
  std::unique_ptr<VariantStepper> stepper(Transformer& t, const std::vector<int>& window) override;
  const EvictionRunStats& stats() const { return stats_; }
  const EvictionRunOptions& options() const { return options_; }

 private:
  friend class EvictionStepper;
  EvictionRunOptions options_;
  EvictionRunStats stats_;
  double attended_sum_ = 0.0;
};

// The quality panel's eviction series (and `kvscope bench evict`'s): window, H2O, and H2O with
// compaction, at each budget, in that order.
std::vector<EvictionRunOptions> eviction_sweep_runs(int block_size, std::span<const int> budgets);

// "window B=64", "sinks(4) B=64", ... plus compaction / position mode when not the defaults.
std::string eviction_variant_name(const EvictorOptions& o);

}  // namespace kvscope

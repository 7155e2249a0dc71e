// Sparse attention by token selection as a CacheVariant: `kvscope eval sparse` runs each window
// through a whole fp32 cache whose views carry a SparseSelector (engine/sparse/key_selector.h),
// compares next-token distributions with dense attention over the same cache, and counts what
// each query attended to and read.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/analysis/quality.h"
#include "engine/sparse/key_selector.h"

namespace kvscope {

// What a selector's queries cost per token (all layers and heads), priced in the cache's bytes,
// beside dense attention over the same live keys.
struct SparseCost {
  double keys_per_query = 0.0;        // keys one query head attended to, on average
  double dense_keys_per_query = 0.0;  // live keys dense attention attends to
  // Multiply-adds: q . k and the weighted value sum over the attended keys (2 x head_dim each),
  // and the indexer's own; dense: 2 x head_dim over every live key.
  double attention_macs = 0.0;
  double indexer_macs = 0.0;
  double dense_macs = 0.0;
  // K/V bytes read: the union of a GQA group's picks, once per KV head (a kernel reads a key for
  // the whole group), and what the indexer reads to choose; dense: every live key's K and V.
  double kv_bytes = 0.0;
  double indexer_bytes = 0.0;
  double dense_kv_bytes = 0.0;
  double macs_fraction() const {
    return dense_macs > 0 ? (attention_macs + indexer_macs) / dense_macs : 0.0;
  }
  double bytes_fraction() const {
    return dense_kv_bytes > 0 ? (kv_bytes + indexer_bytes) / dense_kv_bytes : 0.0;
  }
};
// `k_head_bytes` / `v_head_bytes`: one head of one token's K / V in the cache's format;
// `k_elem_bytes`: one element of K (what the indexer's reads are priced at).
SparseCost sparse_cost(const SparseStats& s, const ModelConfig& c, double k_head_bytes,
                       double v_head_bytes, double k_elem_bytes);

class SparseVariant final : public CacheVariant {
 public:
  // `channels`: proxy_channels() of the model for the proxy selector (empty otherwise). The cache
  // holds blocks of `block_size` in fp32 by default: the loss measured is selection's alone.
  SparseVariant(const SparseOptions& options, int block_size,
                std::vector<std::vector<int>> channels = {}, const KvFormat& k_format = {},
                const KvFormat& v_format = {});
  // Optional: every query's attention rows as the selection left them (a key not picked gets 0),
  // keys by slot = token index; e.g. for the UI's heatmap.
  void set_capture(AttentionObserver* capture) { capture_ = capture; }
  std::string name() const override { return sparse_variant_name(options_); }
  // The whole cache, plus the index the selector keeps beside it: Quest's per-block minima
  // and maxima (2 x head_dim per block and KV head), the proxy's r channels of every key.
  CacheFootprint footprint(const ModelConfig& c) const override;
  void run(Transformer& t, const std::vector<int>& window,
           const std::function<void(int, std::span<const float>)>& on_logits) override;
  bool has_stepper() const override { return true; }
  std::unique_ptr<VariantStepper> stepper(Transformer& t, const std::vector<int>& window) override;
  const SparseStats& stats() const { return stats_; }
  SparseCost cost(const ModelConfig& c) const;
  const SparseOptions& options() const { return options_; }
  int block_size() const { return block_size_; }

 private:
  friend class SparseStepper;
  KvLayout layout(const ModelConfig& c) const;
  SparseOptions options_;
  int block_size_;
  std::vector<std::vector<int>> channels_;
  KvFormat k_format_, v_format_;
  AttentionObserver* capture_ = nullptr;
  SparseStats stats_;
};

}  // namespace kvscope

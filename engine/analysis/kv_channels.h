// Per-channel magnitude of the keys and values a model writes to its KV cache (KIVI, arXiv
// 2402.02750: keys have a few outlier channels with large magnitude across all tokens, values do
// not, which is why KIVI quantizes keys per channel and values per token). A Backend decorator
// sees every K and V row the forward pass stores (keys after RoPE, as cached) and accumulates
// per layer and channel (kv_head * head_dim + dim) the mean and max |x|.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/kv/kv_format.h"

namespace kvscope {

class KvChannelStats {
 public:
  KvChannelStats(int n_layers, int kv_heads, int head_dim);
  // One token's K and V rows of `layer` ([kv_heads * head_dim] each).
  void add(int layer, const float* k, const float* v);

  int n_layers() const { return n_layers_; }
  int channels() const { return channels_; }
  int head_dim() const { return head_dim_; }
  std::int64_t tokens(int layer) const { return tokens_[static_cast<std::size_t>(layer)]; }
  double mean_abs(KvKind kind, int layer, int channel) const;
  double max_abs(KvKind kind, int layer, int channel) const;
  // How far the largest channel stands out: max over channels of mean |x| divided by the median
  // over channels of mean |x| (1 = every channel alike). 0 before any token.
  double outlier_ratio(KvKind kind, int layer) const;
  // Channels of `layer` in decreasing mean |x|, the first `n`.
  std::vector<int> top_channels(KvKind kind, int layer, int n) const;

 private:
  std::size_t at(int layer, int channel) const {
    return static_cast<std::size_t>(layer) * static_cast<std::size_t>(channels_) +
           static_cast<std::size_t>(channel);
  }
  int n_layers_, channels_, head_dim_;
  std::vector<std::int64_t> tokens_;   // [layer]
  std::vector<double> sum_k_, sum_v_;  // [layer][channel] sum of |x|
  std::vector<float> max_k_, max_v_;   // [layer][channel] max |x|
};

// A Backend that forwards every op to `inner` and records each kv_write into `stats`.
std::unique_ptr<Backend> make_channel_stats_backend(Backend& inner, KvChannelStats& stats);

}  // namespace kvscope

// KvChannelStats and the recording Backend decorator.
#include "engine/analysis/kv_channels.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/backend/op_by_op.h"
#include "engine/common/error.h"
#include "engine/kv/kv_view.h"

namespace kvscope {

KvChannelStats::KvChannelStats(int n_layers, int kv_heads, int head_dim)
    : n_layers_(n_layers), channels_(kv_heads * head_dim), head_dim_(head_dim) {
  if (n_layers < 1 || kv_heads < 1 || head_dim < 1) {
    fail_expected("kv channel stats: shape", "positive layers, KV heads and head_dim",
                  std::to_string(n_layers) + " x " + std::to_string(kv_heads) + " x " +
                      std::to_string(head_dim));
  }
  const std::size_t n = static_cast<std::size_t>(n_layers) * static_cast<std::size_t>(channels_);
  tokens_.assign(static_cast<std::size_t>(n_layers), 0);
  sum_k_.assign(n, 0.0);
  sum_v_.assign(n, 0.0);
  max_k_.assign(n, 0.0f);
  max_v_.assign(n, 0.0f);
}

void KvChannelStats::add(int layer, const float* k, const float* v) {
  for (int c = 0; c < channels_; ++c) {
    const float ak = std::fabs(k[c]), av = std::fabs(v[c]);
    sum_k_[at(layer, c)] += ak;
    sum_v_[at(layer, c)] += av;
    max_k_[at(layer, c)] = std::max(max_k_[at(layer, c)], ak);
    max_v_[at(layer, c)] = std::max(max_v_[at(layer, c)], av);
  }
  ++tokens_[static_cast<std::size_t>(layer)];
}

double KvChannelStats::mean_abs(KvKind kind, int layer, int channel) const {
  const std::int64_t n = tokens(layer);
  if (n == 0) return 0.0;
  return (kind == KvKind::kKey ? sum_k_ : sum_v_)[at(layer, channel)] / static_cast<double>(n);
}

double KvChannelStats::max_abs(KvKind kind, int layer, int channel) const {
  return (kind == KvKind::kKey ? max_k_ : max_v_)[at(layer, channel)];
}

double KvChannelStats::outlier_ratio(KvKind kind, int layer) const {
  if (tokens(layer) == 0) return 0.0;
  std::vector<double> m(static_cast<std::size_t>(channels_));
  for (int c = 0; c < channels_; ++c) m[static_cast<std::size_t>(c)] = mean_abs(kind, layer, c);
  const double top = *std::max_element(m.begin(), m.end());
  auto mid = m.begin() + static_cast<std::ptrdiff_t>(m.size() / 2);
  std::nth_element(m.begin(), mid, m.end());
  return *mid > 0.0 ? top / *mid : 0.0;
}

std::vector<int> KvChannelStats::top_channels(KvKind kind, int layer, int n) const {
  std::vector<int> idx(static_cast<std::size_t>(channels_));
  std::iota(idx.begin(), idx.end(), 0);
  const int keep = std::clamp(n, 0, channels_);
  std::partial_sort(idx.begin(), idx.begin() + keep, idx.end(), [&](int a, int b) {
    const double ma = mean_abs(kind, layer, a), mb = mean_abs(kind, layer, b);
    return ma != mb ? ma > mb : a < b;
  });
  idx.resize(static_cast<std::size_t>(keep));
  return idx;
}

namespace {

// The inner backend's ops, each K/V row added to the statistics as it is written.
class ChannelStatsBackend final : public OpByOp {
 public:
  ChannelStatsBackend(Backend& inner, KvChannelStats& stats) : OpByOp(inner), stats_(stats) {}
  std::string name() const override { return inner().name(); }
  void kv_write(const KvSeqView& view, int layer, const float* k, const float* v) override {
    stats_.add(layer, k, v);
    OpByOp::kv_write(view, layer, k, v);
  }

 private:
  KvChannelStats& stats_;
};

}  // namespace

std::unique_ptr<Backend> make_channel_stats_backend(Backend& inner, KvChannelStats& stats) {
  return std::make_unique<ChannelStatsBackend>(inner, stats);
}

}  // namespace kvscope

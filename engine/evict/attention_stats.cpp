// AttentionRecorder implementation.
#include "engine/evict/attention_stats.h"

#include <algorithm>

#include "engine/common/error.h"

namespace kvscope {
namespace {
constexpr int kLocalMax = 32;  // local_mass() answers for recent <= 32
}

AttentionRecorder::AttentionRecorder(AttentionShapeInfo shape, int full_matrix_limit,
                                     int observation_window)
    : shape_(shape),
      full_(shape.max_positions <= full_matrix_limit),
      observation_window_(std::max(1, observation_window)) {
  const std::size_t lhn = static_cast<std::size_t>(shape.n_layers) * shape.n_heads;
  const std::size_t p = static_cast<std::size_t>(shape.max_positions);
  if (full_) full_matrix_.assign(lhn * p * p, 0.0f);
  cumulative_.assign(lhn * p, 0.0f);
  ratio_sum_.assign(lhn * p, 0.0);
  ratio_n_.assign(p, 0);
  local_sum_.assign(lhn * kLocalMax, 0.0);
  local_n_.assign(lhn, 0);
  last_query_.assign(p, 0.0f);
}

void AttentionRecorder::set_slot_positions(std::span<const std::int32_t> positions) {
  slot_positions_.assign(positions.begin(), positions.end());
}

int AttentionRecorder::position_of(std::size_t slot) const {
  return slot < slot_positions_.size() ? slot_positions_[slot] : static_cast<int>(slot);
}

void AttentionRecorder::on_attention(int layer, int head, int query_pos,
                                     std::span<const float> weights) {
  if (query_pos < 0 || query_pos >= shape_.max_positions) {
    fail_expected("attention capture: query position", "< " + std::to_string(shape_.max_positions),
                  std::to_string(query_pos));
  }
  const std::size_t P = static_cast<std::size_t>(shape_.max_positions);
  if (query_pos != last_query_pos_) {  // first call of a new query: roll the per-query buffers
    last_query_pos_ = query_pos;
    ++queries_seen_;
    std::fill(last_query_.begin(), last_query_.end(), 0.0f);
    window_.emplace_back(P, 0.0f);
    if (static_cast<int>(window_.size()) > observation_window_) window_.pop_front();
    for (std::size_t s = 0; s < weights.size(); ++s) {
      if (weights[s] > 0.0f) ++ratio_n_[static_cast<std::size_t>(position_of(s))];
    }
  }
  int live = 0;
  for (float w : weights) live += w > 0.0f ? 1 : 0;
  const std::size_t base = lh(layer, head);
  std::vector<float>& win = window_.back();
  for (std::size_t s = 0; s < weights.size(); ++s) {
    const float w = weights[s];
    if (w == 0.0f) continue;
    const auto pos = static_cast<std::size_t>(position_of(s));
    cumulative_[base * P + pos] += w;
    ratio_sum_[base * P + pos] += static_cast<double>(w) * live;
    last_query_[pos] += w;
    win[pos] += w;
    if (full_) full_matrix_[(base * P + static_cast<std::size_t>(query_pos)) * P + pos] = w;
  }
  // Mass on the k most recent live slots, k = 1..32 (slots are in position order).
  double acc = 0.0;
  int k = 0;
  for (std::size_t s = weights.size(); s-- > 0 && k < kLocalMax;) {
    if (weights[s] == 0.0f) continue;  // evicted slot
    acc += weights[s];
    local_sum_[base * kLocalMax + static_cast<std::size_t>(k)] += acc;
    ++k;
  }
  for (; k < kLocalMax; ++k) local_sum_[base * kLocalMax + static_cast<std::size_t>(k)] += acc;
  ++local_n_[base];
}

float AttentionRecorder::weight(int layer, int head, int query, int key) const {
  if (!full_)
    throw Error("attention capture", "full matrices were not kept (run longer than the limit)");
  const std::size_t P = static_cast<std::size_t>(shape_.max_positions);
  return full_matrix_[(lh(layer, head) * P + static_cast<std::size_t>(query)) * P +
                      static_cast<std::size_t>(key)];
}

float AttentionRecorder::cumulative(int layer, int head, int position) const {
  return cumulative_[lh(layer, head) * static_cast<std::size_t>(shape_.max_positions) +
                     static_cast<std::size_t>(position)];
}

TokenStats AttentionRecorder::token_stats(std::span<const std::int32_t> positions) const {
  TokenStats t;
  t.positions.assign(positions.begin(), positions.end());
  const std::size_t P = static_cast<std::size_t>(shape_.max_positions);
  const std::size_t lhn = static_cast<std::size_t>(shape_.n_layers) * shape_.n_heads;
  for (std::int32_t p : positions) {
    float cum = 0.0f, votes = 0.0f;
    for (std::size_t i = 0; i < lhn; ++i) cum += cumulative_[i * P + static_cast<std::size_t>(p)];
    for (const auto& q : window_) votes += q[static_cast<std::size_t>(p)];
    t.cumulative.push_back(cum);
    t.last_query.push_back(last_query_[static_cast<std::size_t>(p)]);
    t.window_votes.push_back(votes);
  }
  return t;
}

std::vector<SinkReport> AttentionRecorder::detect_sinks(double threshold, int min_queries) const {
  std::vector<SinkReport> out;
  const std::size_t P = static_cast<std::size_t>(shape_.max_positions);
  for (int l = 0; l < shape_.n_layers; ++l) {
    for (int h = 0; h < shape_.n_heads; ++h) {
      for (std::size_t p = 0; p < P; ++p) {
        const int n = ratio_n_[p];
        if (n < min_queries) continue;
        const double strength = ratio_sum_[lh(l, h) * P + p] / n;
        if (strength >= threshold) out.push_back({l, h, static_cast<int>(p), strength, n});
      }
    }
  }
  return out;
}

double AttentionRecorder::first_tokens_share(int layer, int head, int k) const {
  if (queries_seen_ == 0) return 0.0;
  double mass = 0.0;
  for (int p = 0; p < std::min(k, shape_.max_positions); ++p) mass += cumulative(layer, head, p);
  return mass / queries_seen_;
}

double AttentionRecorder::local_mass(int layer, int head, int recent) const {
  recent = std::clamp(recent, 1, kLocalMax);
  const int n = local_n_[lh(layer, head)];
  return n == 0
             ? 0.0
             : local_sum_[lh(layer, head) * kLocalMax + static_cast<std::size_t>(recent - 1)] / n;
}

}  // namespace kvscope

// AttentionRecorder: captures attention weights from the forward pass (an AttentionObserver) for
// one sequence. Full [layer][head][query][key] matrices for short runs; for any length a bounded
// summary: per-position cumulative mass, the latest query rows, and per-head sink statistics.
// Costs nothing when not attached: the forward pass only calls an observer that exists.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/evict/policy.h"

namespace kvscope {

struct AttentionShapeInfo {
  int n_layers = 0;
  int n_heads = 0;
  int max_positions = 0;  // positions the sequence may reach (for sizing)
};

struct SinkReport {
  int layer = 0;
  int head = 0;
  int position = 0;
  double strength = 0.0;  // mean attention received / uniform share 1/(keys visible); 1 = uniform
  int queries = 0;        // queries the mean is over
};

class AttentionRecorder final : public AttentionObserver {
 public:
  // Full matrices are kept when max_positions <= full_matrix_limit.
  AttentionRecorder(AttentionShapeInfo shape, int full_matrix_limit = 512,
                    int observation_window = 8);

  // Slot -> original position for the next forward call (identity when never set or empty).
  void set_slot_positions(std::span<const std::int32_t> positions);
  void on_attention(int layer, int head, int query_pos, std::span<const float> weights) override;

  bool has_full_matrices() const { return full_; }
  // Attention of `query` on `key` (0 when not captured or evicted). Needs full matrices.
  float weight(int layer, int head, int query, int key) const;
  // Sum over every query seen so far of attention on `position`, per layer/head.
  float cumulative(int layer, int head, int position) const;
  int queries_seen() const { return queries_seen_; }

  // Statistics for eviction policies over `positions` (ascending live positions), summed over
  // layers and heads.
  TokenStats token_stats(std::span<const std::int32_t> positions) const;

  // Positions receiving at least `threshold` x the uniform share, averaged over at least
  // `min_queries` queries that could see them, for every layer and head.
  std::vector<SinkReport> detect_sinks(double threshold = 4.0, int min_queries = 16) const;
  // Mean attention mass that (layer, head) puts on the `recent` most recent positions.
  double local_mass(int layer, int head, int recent) const;
  // Mean over the queries seen of the attention mass (layer, head) puts on the first `k`
  // positions of the sequence (original positions; an evicted one receives nothing): the
  // attention-sink share. 0 before any query.
  double first_tokens_share(int layer, int head, int k) const;

 private:
  std::size_t lh(int layer, int head) const {
    return static_cast<std::size_t>(layer) * shape_.n_heads + head;
  }
  int position_of(std::size_t slot) const;
  AttentionShapeInfo shape_;
  bool full_;
  int observation_window_;
  int queries_seen_ = 0;
  int last_query_pos_ = -1;
  std::vector<std::int32_t> slot_positions_;
  std::vector<float> full_matrix_;     // [layers][heads][max_pos][max_pos] when full_
  std::vector<float> cumulative_;      // [layers][heads][max_pos]
  std::vector<double> ratio_sum_;      // [layers][heads][max_pos] sum of weight * visible keys
  std::vector<std::int32_t> ratio_n_;  // [max_pos] queries that saw each position
  std::vector<double> local_sum_;      // [layers][heads][recent buckets 1..32] mass on last k keys
  std::vector<std::int32_t> local_n_;  // [layers][heads]
  std::vector<float> last_query_;      // [max_pos] newest query's mass (all layers, heads)
  std::deque<std::vector<float>> window_;  // last observation_window queries' mass [max_pos]
};

}  // namespace kvscope

// log softmax of a logit vector, max-subtracted and summed in double so that differences of
// log-probabilities (KL, per-token scores) stay stable. Shared by generation scoring and the
// quality metrics.
#pragma once

#include <algorithm>
#include <cmath>
#include <span>

namespace kvscope {

// log sum_i exp(logits[i]).
inline double log_partition(std::span<const float> logits) {
  double mx = -INFINITY;
  for (float v : logits) mx = std::max(mx, static_cast<double>(v));
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  return mx + std::log(sum);
}

namespace detail {
template <typename Out>
void log_softmax_to(std::span<const float> logits, std::span<Out> out) {
  const double log_z = log_partition(logits);
  for (std::size_t i = 0; i < logits.size(); ++i)
    out[i] = static_cast<Out>(static_cast<double>(logits[i]) - log_z);
}
}  // namespace detail

// out[i] = log softmax(logits)[i]; out has logits.size() elements.
inline void log_softmax(std::span<const float> logits, std::span<double> out) {
  detail::log_softmax_to(logits, out);
}
inline void log_softmax(std::span<const float> logits, std::span<float> out) {
  detail::log_softmax_to(logits, out);
}

}  // namespace kvscope

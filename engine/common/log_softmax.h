// log softmax of a logit vector, max-subtracted and summed in double so that differences of
// log-probabilities (KL, per-token scores) stay stable. Shared by generation scoring and the
// quality metrics.
#pragma once

#include <algorithm>
#include <cmath>
#include <span>

namespace kvscope {

// The largest of x as `x > m ? x : m` from -inf (a NaN is passed over), in eight running maxima
// the compiler keeps in one vector register: the same value as one running maximum, which waited
// on each comparison in turn (a tenth of the Quality sweep's scoring for SmolLM2's 49,152 logits).
inline float max_logit(std::span<const float> x) {
  float m[8];
  for (float& v : m) v = -INFINITY;
  std::size_t i = 0;
  for (; i + 8 <= x.size(); i += 8)
    for (std::size_t k = 0; k < 8; ++k) m[k] = x[i + k] > m[k] ? x[i + k] : m[k];
  float r = -INFINITY;
  for (const float v : m) r = v > r ? v : r;
  for (; i < x.size(); ++i) r = x[i] > r ? x[i] : r;
  return r;
}

// log sum_i exp(logits[i]).
inline double log_partition(std::span<const float> logits) {
  const double mx = static_cast<double>(max_logit(logits));
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

// Sampler: greedy / multinomial / nucleus.
#include "engine/model/sampler.h"

#include <algorithm>
#include <cmath>

namespace kvscope {

Sampler::Sampler(SamplerConfig config) : config_(config), state_(config.seed) {}

float Sampler::random_f32() {
  state_ ^= state_ >> 12;
  state_ ^= state_ << 25;
  state_ ^= state_ >> 27;
  auto u32 = static_cast<std::uint32_t>((state_ * 0x2545F4914F6CDD1Dull) >> 32);
  return static_cast<float>(u32 >> 8) / 16777216.0f;
}

int argmax(std::span<const float> values) {
  int best = 0;
  for (std::size_t i = 1; i < values.size(); ++i) {
    if (values[i] > values[static_cast<std::size_t>(best)]) best = static_cast<int>(i);
  }
  return best;
}

void softmax_inplace(std::span<float> values) {
  float max_val = values[0];
  for (float v : values) max_val = std::max(max_val, v);
  float sum = 0.0f;
  for (float& v : values) {
    v = std::exp(v - max_val);
    sum += v;
  }
  for (float& v : values) v /= sum;
}

int Sampler::sample(std::span<float> logits) {
  if (config_.temperature == 0.0f) return argmax(logits);
  for (float& v : logits) v /= config_.temperature;
  softmax_inplace(logits);
  const float coin = random_f32();
  if (config_.top_p <= 0.0f || config_.top_p >= 1.0f) {
    float cdf = 0.0f;
    for (std::size_t i = 0; i < logits.size(); ++i) {
      cdf += logits[i];
      if (coin < cdf) return static_cast<int>(i);
    }
    return static_cast<int>(logits.size()) - 1;
  }
  // Nucleus: keep the smallest set of most likely tokens whose mass exceeds top_p. Tokens below
  // (1 - top_p) / (n - 1) cannot be in it and are cut first, as run.c does.
  const float cutoff = (1.0f - config_.top_p) / static_cast<float>(logits.size() - 1);
  scratch_.clear();
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] >= cutoff) scratch_.emplace_back(logits[i], static_cast<int>(i));
  }
  std::sort(scratch_.begin(), scratch_.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  float cumulative = 0.0f;
  std::size_t last = scratch_.size() - 1;
  for (std::size_t i = 0; i < scratch_.size(); ++i) {
    cumulative += scratch_[i].first;
    if (cumulative > config_.top_p) {
      last = i;
      break;
    }
  }
  const float r = coin * cumulative;
  float cdf = 0.0f;
  for (std::size_t i = 0; i <= last; ++i) {
    cdf += scratch_[i].first;
    if (r < cdf) return scratch_[i].second;
  }
  return scratch_[last].second;
}

}  // namespace kvscope

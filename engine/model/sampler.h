// Sampling the next token: greedy, temperature, top-p; seeded with llama2.c's xorshift so a seeded
// run is reproducible (and matches run.c's choices for the same seed).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvscope {

struct SamplerConfig {
  float temperature = 0.0f;  // 0 = greedy
  float top_p = 0.9f;        // used when in (0, 1)
  std::uint64_t seed = 42;
};

class Sampler {
 public:
  explicit Sampler(SamplerConfig config);
  // Picks a token; may modify `logits` in place (scaling, softmax), as run.c does.
  int sample(std::span<float> logits);
  std::uint64_t state() const { return state_; }

 private:
  float random_f32();
  SamplerConfig config_;
  std::uint64_t state_;
  std::vector<std::pair<float, int>> scratch_;  // [vocab] (prob, id) for top-p
};

int argmax(std::span<const float> values);
void softmax_inplace(std::span<float> values);

}  // namespace kvscope

// The tokens each request of a run has generated up to a step, folded from its DecodeToken
// events: what the Compare panel sets side by side for the run and its variant.
#pragma once

#include <functional>
#include <map>
#include <span>
#include <vector>

#include "engine/trace/timeline.h"

namespace kvscope::ui {

class GeneratedTokens {
 public:
  using EventsAt = std::function<std::span<const Event>(int step)>;

  // Folds the events of the steps after the last call up to `step`; starts over when `run`
  // (any number that changes with the run: a source generation, a session's address) changes or
  // `step` goes back.
  void catch_up(long long run, int step, const EventsAt& events_at);

  // Request id -> its generated token ids, in order.
  const std::map<int, std::vector<int>>& tokens() const { return tokens_; }

 private:
  long long run_ = -1;
  int built_until_ = -1;
  std::map<int, std::vector<int>> tokens_;
  std::map<int, std::vector<int>> by_position_;  // request id -> [position] sampled id or -1
};

// How two runs' generated tokens for one request compare: the length of their common beginning,
// and whether they are the same so far (one may only be further along).
struct TokenAgreement {
  std::size_t common = 0;
  bool same = true;  // no token differs where both have one
};
TokenAgreement compare_tokens(std::span<const int> a, std::span<const int> b);

}  // namespace kvscope::ui

#include "app/core/generated_text.h"

#include <algorithm>
#include <set>

#include "app/core/request_text.h"

namespace kvscope::ui {

void GeneratedTokens::catch_up(long long run, int step, const EventsAt& events_at) {
  if (run != run_ || step < built_until_) {
    run_ = run;
    built_until_ = -1;
    tokens_.clear();
    by_position_.clear();
  }
  std::set<int> touched;
  for (int s = built_until_ + 1; s <= step; ++s) {
    for (const Event& e : events_at(s)) {
      if (e.type != EventType::kDecodeToken) continue;
      add_sampled_token(e, by_position_);
      touched.insert(e.request);
    }
  }
  // The generated tokens in order: the positions that hold one (the prompt's hold none).
  for (const int id : touched) {
    std::vector<int>& t = tokens_[id];
    t.clear();
    for (const int tok : by_position_[id]) {
      if (tok >= 0) t.push_back(tok);
    }
  }
  built_until_ = std::max(built_until_, step);
}

TokenAgreement compare_tokens(std::span<const int> a, std::span<const int> b) {
  TokenAgreement r;
  const std::size_t n = std::min(a.size(), b.size());
  while (r.common < n && a[r.common] == b[r.common]) ++r.common;
  r.same = r.common == n;
  return r;
}

}  // namespace kvscope::ui

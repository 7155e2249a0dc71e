#include "engine/infer/step_runner.h"

#include <algorithm>
#include <string>
#include <vector>

#include "engine/common/error.h"

namespace kvscope {

void run_tokens(Transformer& t, KvCacheManager& cache, SeqId seq, std::span<const int> tokens,
                int first_pos, const MlaCodec* mla,
                const std::function<void(int, std::span<const float>)>& on_logits,
                int step_tokens) {
  if (step_tokens < 1) {
    throw InternalError("run_tokens", "step_tokens " + std::to_string(step_tokens) + " < 1");
  }
  const auto vocab = static_cast<std::size_t>(t.config().vocab_size);
  const int n = static_cast<int>(tokens.size());
  std::vector<StepToken> step;
  for (int begin = 0; begin < n; begin += step_tokens) {
    const int count = std::min(step_tokens, n - begin);
    cache.require_append_slots(seq, count);
    KvSeqView view = cache.view(seq);
    view.mla = mla;
    const int end_slots = view.num_slots;
    step.clear();
    for (int i = 0; i < count; ++i) {
      view.num_slots = end_slots - count + i + 1;  // writes its own slot, sees those before it
      step.push_back(StepToken{tokens[static_cast<std::size_t>(begin + i)], first_pos + begin + i,
                               view, true, nullptr});
    }
    const std::span<const float> logits = t.forward_step(step);
    for (int i = 0; i < count; ++i) {
      on_logits(first_pos + begin + i, logits.subspan(static_cast<std::size_t>(i) * vocab, vocab));
    }
  }
}

}  // namespace kvscope

// Helpers for the scheduler tests (header-only: the test CMake globs *_test.cpp): a mixed
// workload on the real model and a single-sequence reference generator written independently of
// the Simulator.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/model/tokenizer.h"
#include "engine/sched/simulator.h"
#include "tests/test_support.h"

namespace kvscope::test {

// `n` requests on the real model: different story prompts (tokenized with BOS), staggered
// arrivals, max_new_tokens between 20 and 60.
// (mixed_requests)
// Greedy generation of one request alone through a private contiguous cache: prompt forced, then
// up to max_new tokens, stopping after BOS or EOS (which is kept, as the Simulator does).
// (generate_alone)
// Runs to completion, checking invariants after every step; fails the test on a stuck run.
// (run_checked)

inline std::vector<SimRequest> mixed_requests(int n) {
  static const char* kPrompts[] = {"Once upon a time", "Lily had a red ball",
                                   "The cat sat",      "Tom and his dog went to the park",
                                   "One day",          "The sun was hot",
                                   "A little bird",    "Sam wanted to play with his big truck",
                                   "Mom said",         "There was a tree"};
  const auto& m = real_model();
  std::vector<SimRequest> out;
  for (int i = 0; i < n; ++i) {
    SimRequest r;
    r.arrival_step = (i * 3) % 7;
    r.prompt_tokens = m.tokenizer->encode(kPrompts[i % 10], /*bos=*/true, /*eos=*/false);
    r.max_new_tokens = 20 + (i * 17) % 41;
    r.priority = i % 3;
    out.push_back(r);
  }
  return out;
}

inline SimModel real_sim_model() {
  return SimModel{real_model().model->config(), real_model().model};
}

inline std::vector<int> generate_alone(const SimRequest& request) {
  const auto& m = real_model();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  const ModelConfig& c = m.model->config();
  KvLayout layout{c.n_layers, c.n_kv_heads, c.head_dim(), 16, (c.seq_len + 15) / 16, {}, {}};
  KvCacheManager cache(layout, AllocatorKind::kContiguous, c.seq_len, true);
  const SeqId seq(0);
  cache.require_add_sequence(seq);
  std::vector<int> tokens = request.prompt_tokens, generated;
  for (int pos = 0; static_cast<int>(generated.size()) < request.max_new_tokens; ++pos) {
    cache.require_append_slots(seq, 1);
    std::span<float> logits =
        t.forward(tokens[static_cast<std::size_t>(pos)], pos, cache.view(seq));
    if (pos + 1 < static_cast<int>(tokens.size())) continue;  // still in the prompt
    const int next = argmax(logits);
    tokens.push_back(next);
    generated.push_back(next);
    if (next == kTokenBos || next == kTokenEos) break;
  }
  return generated;
}

inline void run_checked(Simulator& sim, int max_steps = 5000) {
  sim.check_invariants();
  while (sim.step()) {
    ASSERT_NO_THROW(sim.check_invariants()) << "after step " << sim.current_step() - 1;
    ASSERT_LT(sim.current_step(), max_steps) << "the run does not finish";
  }
}

}  // namespace kvscope::test

// Helpers for the scheduler tests (header-only: the test CMake globs *_test.cpp): a mixed
// workload on the real model and a single-sequence reference generator written independently of
// the Simulator.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
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

// A Simulator run that keeps every logits vector a request sampled from: (request, generated
// index) -> logits. Start it with start_logged (to step it yourself) or run_logged (to the end).
struct LoggedRun {
  std::map<std::pair<int, int>, std::vector<float>> logits;
  std::unique_ptr<Simulator> sim;
};

inline std::unique_ptr<LoggedRun> start_logged(const SimConfig& c,
                                               const std::vector<SimRequest>& requests) {
  auto out = std::make_unique<LoggedRun>();
  out->sim = std::make_unique<Simulator>(c, real_sim_model(), requests);
  LoggedRun* run = out.get();
  out->sim->set_logits_observer([run](std::int32_t id, int g, std::span<const float> l) {
    run->logits[{id, g}] = std::vector<float>(l.begin(), l.end());
  });
  return out;
}

inline std::unique_ptr<LoggedRun> run_logged(const SimConfig& c,
                                             const std::vector<SimRequest>& requests) {
  std::unique_ptr<LoggedRun> out = start_logged(c, requests);
  run_checked(*out->sim);
  return out;
}

// Every request finished in both runs with the same tokens, and every logits vector agrees within
// 1e-5.
inline void expect_same_outputs(const LoggedRun& a, const LoggedRun& b) {
  ASSERT_EQ(a.sim->num_requests(), b.sim->num_requests());
  for (int i = 0; i < a.sim->num_requests(); ++i) {
    ASSERT_EQ(a.sim->request(i).phase, RequestPhase::kFinished) << "request " << i;
    EXPECT_EQ(a.sim->request(i).generated_tokens(), b.sim->request(i).generated_tokens())
        << "request " << i;
  }
  ASSERT_EQ(a.logits.size(), b.logits.size());
  for (const auto& [key, want] : b.logits) {
    const auto it = a.logits.find(key);
    ASSERT_NE(it, a.logits.end());
    float worst = 0.0f;
    for (std::size_t k = 0; k < want.size(); ++k)
      worst = std::max(worst, std::fabs(it->second[k] - want[k]));
    ASSERT_LE(worst, 1e-5f) << "request " << key.first << " token " << key.second;
  }
}

}  // namespace kvscope::test

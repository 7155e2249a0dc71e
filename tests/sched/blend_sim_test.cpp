// CacheBlend inside the Simulator on the real model (stories260K): requests whose prompts open
// with chunks get them at admission, each prefilled alone and re-rotated into place, a share
// recomputed. Recomputing every chunk token is the plain prompt's run, token for token (under
// batching, several requests at once); the picks never land in the first chunk (a prefix); with
// nothing recomputed the run still completes with its invariants held; what the Simulator
// cannot run beside it is refused at its setting.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/analysis/cache_blend.h"
#include "engine/common/error.h"
#include "tests/sched/sim_test_support.h"

namespace kvscope {
namespace {

// Requests of three chunks (stories) and a question, staggered.
std::vector<SimRequest> chunked_requests() {
  static const char* kChunks[][3] = {
      {"Once upon a time, there was a little dog named Spot.", " Spot liked to run in the park.",
       " One day he found a red ball under a tree."},
      {"Lily had a big red ball.", " She played with it every day in the garden.",
       " Her brother Tom wanted to play too."}};
  const auto& m = test::real_model();
  std::vector<SimRequest> out;
  for (int i = 0; i < 2; ++i) {
    SimRequest r;
    r.arrival_step = i * 2;
    for (int c = 0; c < 3; ++c) {
      const auto ids = m.tokenizer->encode(kChunks[i][c], /*bos=*/c == 0, /*eos=*/false);
      r.prompt_tokens.insert(r.prompt_tokens.end(), ids.begin(), ids.end());
      r.blend_chunks.push_back(static_cast<int>(ids.size()));
    }
    const auto q = m.tokenizer->encode(" Then", /*bos=*/false, /*eos=*/false);
    r.prompt_tokens.insert(r.prompt_tokens.end(), q.begin(), q.end());
    r.max_new_tokens = 24;
    out.push_back(r);
  }
  return out;
}

SimConfig blend_config(int percent) {
  SimConfig c;
  c.block_size = 8;
  c.num_blocks = 128;
  c.blend = SimConfig::Blend{percent, 1};
  return c;
}

std::vector<std::vector<int>> generated(Simulator& sim, int n) {
  std::vector<std::vector<int>> out;
  for (int i = 0; i < n; ++i) out.push_back(sim.request(i).generated_tokens());
  return out;
}

TEST(BlendSimulator, AllRecomputedIsThePlainPromptTokenForToken) {
  const std::vector<SimRequest> requests = chunked_requests();
  Simulator plain(blend_config(100), test::real_sim_model(), [&] {
    std::vector<SimRequest> r = requests;
    for (SimRequest& q : r) q.blend_chunks.clear();
    return r;
  }());
  test::run_checked(plain);
  Simulator all(blend_config(100), test::real_sim_model(), requests);
  test::run_checked(all);
  EXPECT_EQ(generated(all, 2), generated(plain, 2));
  for (int i = 0; i < 2; ++i) {
    int chunks = 0;
    for (const int n : requests[static_cast<std::size_t>(i)].blend_chunks) chunks += n;
    EXPECT_EQ(static_cast<int>(all.blend_recomputed(i).size()), chunks) << "request " << i;
    EXPECT_TRUE(plain.blend_recomputed(i).empty());
  }
}

TEST(BlendSimulator, PicksComeFromTheLaterChunks) {
  const std::vector<SimRequest> requests = chunked_requests();
  Simulator sim(blend_config(30), test::real_sim_model(), requests);
  test::run_checked(sim);
  EXPECT_TRUE(sim.done());
  for (int i = 0; i < 2; ++i) {
    const SimRequest& r = requests[static_cast<std::size_t>(i)];
    int chunks = 0;
    for (const int n : r.blend_chunks) chunks += n;
    const std::vector<int>& picks = sim.blend_recomputed(i);
    EXPECT_EQ(static_cast<int>(picks.size()), recompute_count(chunks, 30)) << "request " << i;
    EXPECT_TRUE(std::is_sorted(picks.begin(), picks.end()));
    EXPECT_TRUE(std::all_of(picks.begin(), picks.end(),
                            [&](int p) { return p >= r.blend_chunks[0] && p < chunks; }))
        << "request " << i;
  }
  // Nothing recomputed: plain reuse, which runs to the end with its invariants held.
  Simulator reuse(blend_config(0), test::real_sim_model(), requests);
  test::run_checked(reuse);
  EXPECT_TRUE(reuse.done());
  EXPECT_TRUE(reuse.blend_recomputed(0).empty());
}

TEST(BlendSimulator, RefusesWhatItCannotRunBeside) {
  const std::vector<SimRequest> requests = chunked_requests();
  const auto refused = [&](const SimConfig& c, const std::vector<SimRequest>& r,
                           const std::string& want) {
    try {
      Simulator sim(c, test::real_sim_model(), r);
      ADD_FAILURE() << "accepted; wanted: " << want;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), want);
    }
  };
  SimConfig prefix = blend_config(15);
  prefix.prefix_caching = true;
  refused(prefix, requests,
          "cache.blend: expected none of prefix caching, token eviction, MLA, sparse attention, "
          "tiers, KIVI or swap preemption beside it, got cache.prefix_caching");
  SimConfig swap = blend_config(15);
  swap.preemption = PreemptionMode::kSwap;
  refused(swap, requests,
          "cache.blend: expected none of prefix caching, token eviction, MLA, sparse attention, "
          "tiers, KIVI or swap preemption beside it, got cache.preemption swap");
  SimConfig deep = blend_config(15);
  deep.blend->check_layer = 4;  // stories260K has 5 layers
  refused(deep, requests,
          "cache.blend.check_layer: expected a layer from 0 to 3 (the model has 5 layers; some "
          "must run after the check), got 4");
  std::vector<SimRequest> whole = requests;
  int covered = 0;
  for (const int n : whole[1].blend_chunks) covered += n;
  // A last chunk over the question: the chunks now cover the whole prompt.
  whole[1].blend_chunks.push_back(static_cast<int>(whole[1].prompt_tokens.size()) - covered);
  refused(blend_config(15), whole,
          "requests[1].chunks: expected chunks shorter than the prompt (a question follows "
          "them), got " +
              std::to_string(whole[1].prompt_tokens.size()) + " of its " +
              std::to_string(whole[1].prompt_tokens.size()) + " tokens");
  std::vector<SimRequest> samples = requests;
  samples[0].n_samples = 2;
  refused(blend_config(15), samples, "requests[0].n: expected 1 with chunks (CacheBlend), got 2");
  try {
    Simulator sim(blend_config(15), SimModel{test::real_model().model->config(), nullptr},
                  requests);
    ADD_FAILURE() << "a bookkeeping run accepted cache.blend";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "cache.blend: expected a model with weights (a bookkeeping run computes no K/V to "
              "reuse), got no weights");
  }
}

}  // namespace
}  // namespace kvscope

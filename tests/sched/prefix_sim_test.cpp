// Prefix caching and parallel sampling in the Simulator on the real model: with sharing on, every
// request produces the same tokens and logits as with sharing off while prefill is skipped;
// copy-on-write for forked samples; hash vs radix; byte-identical recordings.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "engine/common/error.h"
#include "tests/sched/sim_test_support.h"

namespace kvscope {
namespace {

// A system prompt shared by every request, then a short user turn of its own.
std::vector<SimRequest> system_prompt_requests(int n, int max_new) {
  const auto& m = test::real_model();
  static const char* kUser[] = {"Lily found a shell.", "Tom lost his hat.", "A dog ran fast.",
                                "The sky was dark.",   "Mia baked a cake.", "Ben saw a frog."};
  std::vector<SimRequest> out;
  for (int i = 0; i < n; ++i) {
    SimRequest r;
    r.arrival_step = i == 0 ? 0 : 1 + i / 4;  // the first one fills the cache
    r.prompt_tokens = m.tokenizer->encode(
        std::string("You tell short happy stories for small children. Every story has a kind "
                    "friend and ends well. ") +
            kUser[i % 6],
        true, false);
    r.max_new_tokens = max_new + i % 5;
    out.push_back(std::move(r));
  }
  return out;
}

using test::expect_same_outputs;
using SimRun = std::unique_ptr<test::LoggedRun>;

SimRun run(const SimConfig& c, const std::vector<SimRequest>& requests) {
  return test::run_logged(c, requests);
}

SimConfig base(bool sharing) {
  SimConfig c;
  c.block_size = 8;
  c.num_blocks = 160;
  c.prefix_caching = sharing;
  return c;
}

TEST(PrefixSim, SharedSystemPromptSameTokensAndLogitsWithFewerPrefillTokens) {
  const auto requests = system_prompt_requests(16, 12);
  const SimRun off = run(base(false), requests);
  const SimRun on = run(base(true), requests);
  expect_same_outputs(*on, *off);
  const PrefixCacheMetrics& pm = on->sim->prefix_cache()->metrics();
  EXPECT_GT(pm.hit_tokens, 15 * 24) << "15 later requests each skip the system prompt's blocks";
  EXPECT_EQ(on->sim->prefill_tokens_computed() + pm.hit_tokens,
            off->sim->prefill_tokens_computed());
  const StepMetrics& last = on->sim->timeline()->all_metrics().back();
  EXPECT_EQ(last.prefix_hit_tokens, pm.hit_tokens);
  EXPECT_EQ(last.prompt_tokens, off->sim->timeline()->all_metrics().back().prompt_tokens);
  EXPECT_EQ(last.blocks_used, 0);
  EXPECT_GT(last.blocks_cached_free, 0) << "the prefix stays cached after every request finished";
  int peak_on = 0, peak_off = 0;
  for (const StepMetrics& m : on->sim->timeline()->all_metrics())
    peak_on = std::max(peak_on, m.blocks_used);
  for (const StepMetrics& m : off->sim->timeline()->all_metrics())
    peak_off = std::max(peak_off, m.blocks_used);
  EXPECT_LT(peak_on, peak_off) << "shared blocks are held once";
}

TEST(PrefixSim, SmallPoolPreemptionAndEvictionStayCorrect) {
  const auto requests = system_prompt_requests(16, 30);
  for (auto mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
    for (auto policy : {EvictionPolicyKind::kLru, EvictionPolicyKind::kFifo}) {
      SimConfig off_cfg = base(false);
      off_cfg.num_blocks = 40;
      off_cfg.preemption = mode;
      off_cfg.host_blocks = 16;
      off_cfg.max_tokens_per_step = 40;
      SimConfig on_cfg = off_cfg;
      on_cfg.prefix_caching = true;
      on_cfg.cached_block_eviction = policy;
      const SimRun off = run(off_cfg, requests);
      const SimRun on = run(on_cfg, requests);
      SCOPED_TRACE(preemption_name(mode));
      expect_same_outputs(*on, *off);
      EXPECT_GT(on->sim->prefix_cache()->metrics().hit_tokens, 0);
      EXPECT_GT(on->sim->timeline()->all_metrics().back().preemptions, 0) << "the pool is tight";
    }
  }
}

TEST(PrefixSim, ParallelSamplingCopiesOnWriteAndMatchesIndependentSamples) {
  auto requests = system_prompt_requests(3, 14);
  for (auto& r : requests) r.n_samples = 4;
  SimConfig off_cfg = base(false);
  off_cfg.sampler.temperature = 0.9f;
  off_cfg.sampler.seed = 7;
  SimConfig on_cfg = off_cfg;
  on_cfg.prefix_caching = true;
  const SimRun off = run(off_cfg, requests);
  const SimRun on = run(on_cfg, requests);
  ASSERT_EQ(on->sim->num_requests(), 12);
  expect_same_outputs(*on, *off);
  int cow = 0, forked = 0;
  for (const Event& e : on->sim->timeline()->events())
    cow += e.type == EventType::kBlockCopiedOnWrite;
  for (int i = 0; i < 12; ++i) forked += on->sim->request(i).fork_of >= 0;
  EXPECT_EQ(forked, 9);
  EXPECT_GE(cow, 9) << "each fork's partial prompt block is copied before its first write";
  bool diverged = false;
  for (int i = 1; i < 4; ++i)
    diverged |= on->sim->request(i).generated_tokens() != on->sim->request(0).generated_tokens();
  EXPECT_TRUE(diverged) << "seeded temperature sampling must make the samples differ";
  EXPECT_LT(on->sim->prefill_tokens_computed(), off->sim->prefill_tokens_computed());
}

TEST(PrefixSim, HashAndRadixGiveIdenticalHitsOnABlockAlignedWorkload) {
  std::vector<SimRequest> requests;
  for (int i = 0; i < 12; ++i) {
    SimRequest r;
    r.arrival_step = i;
    for (int t = 0; t < 32; ++t) r.prompt_tokens.push_back(1 + (t * 7) % 300);  // 4 shared blocks
    for (int t = 0; t < 8 * (1 + i % 3); ++t) r.prompt_tokens.push_back(300 + (i * 13 + t) % 200);
    r.max_new_tokens = 6;
    requests.push_back(std::move(r));
  }
  SimConfig c = base(true);
  const SimRun hash = run(c, requests);
  c.prefix_index = IndexKind::kRadix;
  const SimRun radix = run(c, requests);
  EXPECT_GT(hash->sim->prefix_cache()->metrics().hit_tokens, 11 * 32 - 1);
  EXPECT_EQ(hash->sim->prefix_cache()->metrics().hit_tokens,
            radix->sim->prefix_cache()->metrics().hit_tokens);
  for (int i = 0; i < 12; ++i)
    EXPECT_EQ(hash->sim->request(i).prefix_hit_tokens, radix->sim->request(i).prefix_hit_tokens);
  expect_same_outputs(*hash, *radix);
}

std::string recording_bytes(const Simulator& sim, const std::string& name) {
  const auto path = std::filesystem::temp_directory_path() / name;
  sim.timeline()->save(path.string());
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::filesystem::remove(path);
  return ss.str();
}

TEST(PrefixSim, RecordingsAreByteIdentical) {
  auto requests = system_prompt_requests(8, 10);
  requests[2].n_samples = 3;
  SimConfig c = base(true);
  c.num_blocks = 30;
  c.sampler.temperature = 0.8f;
  const SimRun a = run(c, requests);
  const SimRun b = run(c, requests);
  const std::string ra = recording_bytes(*a->sim, "kvscope_prefix_a.kvrec");
  EXPECT_GT(ra.size(), 1000u);
  EXPECT_EQ(ra, recording_bytes(*b->sim, "kvscope_prefix_b.kvrec"));
}

TEST(PrefixSim, ContiguousAllocatorIsRejectedClearly) {
  SimConfig c = base(true);
  c.allocator = AllocatorKind::kContiguous;
  c.max_seq_len = 64;
  try {
    Simulator sim(c, test::real_sim_model(), system_prompt_requests(2, 4));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("paged"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvscope

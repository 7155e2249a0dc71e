// KV tiers behind the Simulator's prefix cache, on the real model: blocks the pool evicts are
// written to host and disk and reloaded on a later hit, and every request produces the same tokens
// and logits with any tier configuration (tiers change cost, never results).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include "engine/common/error.h"
#include "tests/sched/sim_test_support.h"

namespace kvscope {
namespace {

// Four long system prompts taken in turn, one request at a time, so a small pool has evicted a
// prompt's blocks by the time it comes round again.
std::vector<SimRequest> rotating_topics(int n) {
  static const char* kTopics[] = {
      "You tell short happy stories for small children. Every story has a kind friend and a "
      "dog and ends well with a hug.",
      "You write about the sea. Every story has a boat, a storm, a brave girl named Lily and a "
      "lighthouse that saves the day.",
      "You write funny stories about a cat who wants to fly. He tries a kite, a box and a big "
      "red balloon, and his friends laugh.",
      "You tell stories about a garden. A little seed grows into a tall tree while the sun, the "
      "rain and a bird help it along.",
  };
  const auto& m = test::real_model();
  std::vector<SimRequest> out;
  for (int i = 0; i < n; ++i) {
    SimRequest r;
    r.arrival_step = 12 * i;
    r.prompt_tokens = m.tokenizer->encode(
        std::string(kTopics[i % 4]) + (i % 2 ? " Tom said hello." : " One day"), true, false);
    r.max_new_tokens = 8;
    out.push_back(std::move(r));
  }
  return out;
}

using test::expect_same_outputs;
using TierRun = std::unique_ptr<test::LoggedRun>;

TierRun run(const SimConfig& c, const std::vector<SimRequest>& requests) {
  return test::run_logged(c, requests);
}

SimConfig small_pool(std::vector<KvTierOptions> tiers) {
  SimConfig c;
  c.block_size = 8;
  c.num_blocks = 12;  // about two prompts: the third evicts the first's blocks
  c.prefix_caching = true;
  c.tiers = std::move(tiers);
  return c;
}

TEST(TierSim, TiersReloadEvictedPrefixesAndChangeNoTokenOrLogit) {
  const std::vector<SimRequest> requests = rotating_topics(12);
  const TierRun none = run(small_pool({}), requests);
  const TierRun host = run(small_pool({{"host", TierMedium::kHost, 64, ""}}), requests);
  // A host tier of 24 blocks keeps about half of what comes round again; disk has the rest.
  const TierRun both = run(small_pool({{"host", TierMedium::kHost, 24, ""},
                                       {"disk", TierMedium::kDisk, 64, test::temp_path("")}}),
                           requests);
  SimConfig through_config = small_pool(
      {{"host", TierMedium::kHost, 24, ""}, {"disk", TierMedium::kDisk, 64, test::temp_path("")}});
  through_config.tier_write_through = true;
  const TierRun through = run(through_config, requests);
  expect_same_outputs(*host, *none);
  expect_same_outputs(*both, *none);
  expect_same_outputs(*through, *none);
  // Write-through writes every block as it is cached, so the pool's evictions write nothing new:
  // the first tier has been written at least once per cached block, and the same prompts come
  // back from the tiers.
  EXPECT_GE(through->sim->tiers()->io(0).blocks_written,
            through->sim->prefix_cache()->metrics().inserted_blocks);
  EXPECT_EQ(through->sim->tier_hit_tokens(), both->sim->tier_hit_tokens());

  // Without tiers the evicted prompts are recomputed; with them they come back from a tier.
  EXPECT_EQ(none->sim->tier_hit_tokens(), 0);
  EXPECT_GT(host->sim->tier_hit_tokens(), 0);
  EXPECT_EQ(host->sim->prefill_tokens_computed() + host->sim->tier_hit_tokens(),
            none->sim->prefill_tokens_computed());
  ASSERT_NE(both->sim->tiers(), nullptr);
  const KvTierStore& store = both->sim->tiers()->store();
  EXPECT_GT(both->sim->tiers()->reloads()[0].blocks, 0);
  EXPECT_GT(both->sim->tiers()->reloads()[1].blocks, 0);  // the host tier passed blocks down
  EXPECT_EQ(both->sim->tier_hit_tokens(), host->sim->tier_hit_tokens());
  EXPECT_EQ(store.io(1).corrupt_reads, 0);
  EXPECT_EQ(store.io(1).failed_writes, 0);
  EXPECT_GT(store.io(1).write_seconds, 0.0);
  std::int64_t per_request = 0;
  for (int i = 0; i < both->sim->num_requests(); ++i)
    per_request += both->sim->request(i).tier_hit_tokens;
  EXPECT_EQ(per_request, both->sim->tier_hit_tokens());
  EXPECT_EQ(both->sim->tier_hit_tokens(), 8 * (both->sim->tiers()->reloads()[0].blocks +
                                               both->sim->tiers()->reloads()[1].blocks));
}

// Prefetch reads on another thread but never changes what the tiers hold: the same reloads from
// the same tiers, the same tokens; without it, admission waits for every read.
TEST(TierSim, PrefetchChangesNeitherTokensNorWhichTierServesABlock) {
  std::vector<SimRequest> requests = rotating_topics(12);
  for (std::size_t i = 0; i < requests.size(); ++i)
    requests[i].arrival_step = 8 * static_cast<int>(i);  // each waits while the one before decodes
  auto config = [](bool prefetch) {
    SimConfig c = small_pool({{"host", TierMedium::kHost, 24, ""},
                              {"disk", TierMedium::kDisk, 64, test::temp_path("")}});
    c.max_running = 1;
    c.tier_prefetch = prefetch;
    return c;
  };
  const TierRun on = run(config(true), requests);
  const TierRun off = run(config(false), requests);
  expect_same_outputs(*on, *off);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(on->sim->tiers()->reloads()[static_cast<std::size_t>(k)].blocks,
              off->sim->tiers()->reloads()[static_cast<std::size_t>(k)].blocks)
        << "tier " << k;
    EXPECT_EQ(on->sim->tiers()->io(k).blocks_written, off->sim->tiers()->io(k).blocks_written);
  }
  EXPECT_GT(on->sim->tiers()->reloads()[1].blocks, 0);
  EXPECT_GT(on->sim->tiers()->load_seconds(), 0.0);
  EXPECT_EQ(off->sim->tiers()->exposed_seconds(), off->sim->tiers()->load_seconds());
  double waited = 0.0;
  for (int i = 0; i < on->sim->num_requests(); ++i)
    waited += on->sim->request(i).tier_exposed_seconds;
  EXPECT_DOUBLE_EQ(waited, on->sim->tiers()->exposed_seconds());
}

TEST(TierSim, ACorruptDiskTierIsRecomputedNeverServed) {
  const std::vector<SimRequest> requests = rotating_topics(12);
  const TierRun none = run(small_pool({}), requests);
  TierRun bad =
      test::start_logged(small_pool({{"host", TierMedium::kHost, 6, ""},
                                     {"disk", TierMedium::kDisk, 64, test::temp_path("")}}),
                         requests);
  // Run until the disk holds blocks, then overwrite every byte of its file.
  const KvTierStore& store = bad->sim->tiers()->store();
  while (store.io(1).blocks_written < 8 && bad->sim->step()) {
  }
  ASSERT_GE(store.io(1).blocks_written, 8);
  {
    std::fstream f(store.file_path(1), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0, std::ios::end);
    const std::string junk(static_cast<std::size_t>(f.tellp()), '\x5a');
    f.seekp(0);
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  test::run_checked(*bad->sim);
  expect_same_outputs(*bad, *none);
  EXPECT_GT(store.io(1).corrupt_reads, 0);
  EXPECT_NE(store.io(1).first_failure.find("failed its check"), std::string::npos);
  // What the disk lost was recomputed: prefill plus reloads still cover what the run without
  // tiers computed.
  EXPECT_EQ(bad->sim->prefill_tokens_computed() + bad->sim->tier_hit_tokens(),
            none->sim->prefill_tokens_computed());
}

TEST(TierSim, BookkeepingRunsFindTheSameTierHitsWithoutBytes) {
  const std::vector<SimRequest> requests = rotating_topics(12);
  const TierRun real = run(small_pool({{"host", TierMedium::kHost, 64, ""}}), requests);
  SimModel shape{test::real_model().model->config(), nullptr};
  Simulator sim(small_pool({{"host", TierMedium::kHost, 64, ""}}), shape, requests);
  test::run_checked(sim);
  // Bookkeeping generates token 0, so only the prompts' blocks match: the prompt hits agree.
  EXPECT_GT(sim.tier_hit_tokens(), 0);
  EXPECT_EQ(sim.tiers()->io(0).write_seconds, 0.0);
  EXPECT_TRUE(sim.tiers()->store().file_path(0).empty());
  EXPECT_EQ(sim.tier_hit_tokens(), real->sim->tier_hit_tokens());
}

TEST(TierSim, TiersNeedPrefixCaching) {
  SimConfig c = small_pool({{"host", TierMedium::kHost, 4, ""}});
  c.prefix_caching = false;
  EXPECT_EQ(
      test::error_of([&] { Simulator sim(c, test::real_sim_model(), rotating_topics(1)); }),
      "cache.tiers: needs prefix caching (the tiers hold the blocks the prefix cache evicts), got "
      "prefix caching off");
}

}  // namespace
}  // namespace kvscope

// Disaggregated prefill/decode (engine/sched/disagg.h): the decode instance's tokens equal what
// each request generates alone, the K/V sent is exactly the prompt blocks' bytes, the decode
// instance computes one prompt token per request, the clock by hand in both transfer modes, the
// colocated baseline's interference, and the settings it refuses.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/common/error.h"
#include "engine/model/synthetic.h"
#include "engine/sched/disagg.h"
#include "tests/sched/sim_test_support.h"

namespace kvscope {
namespace {

SimConfig config(int blocks) {
  SimConfig c;
  c.block_size = 8;
  c.num_blocks = blocks;
  return c;
}

DisaggOptions options(TransferMode mode, int prefill_blocks, int decode_blocks) {
  DisaggOptions o;
  o.transfer = mode;
  o.prefill_blocks = prefill_blocks;
  o.decode_blocks = decode_blocks;
  o.arrival_interval_seconds = 20e-6;
  return o;
}

void run_checked(DisaggRun& run) {
  run.check_invariants();
  int steps = 0;
  while (run.step()) {
    ASSERT_NO_THROW(run.check_invariants()) << "after step " << steps;
    ASSERT_LT(++steps, 20000) << "stuck";
  }
  EXPECT_TRUE(run.done());
}

int blocks_for(int tokens, int block_size) {
  return (tokens + block_size - 1) / block_size;
}

// Requests that share a 40-token prefix (5 blocks of 8) with tails of 0 to 9 tokens, real weights.
std::vector<SimRequest> shared_prefix_requests(int n, int arrival_every) {
  const auto& m = test::real_model();
  const std::vector<int> prefix = m.tokenizer->encode(
      "Once upon a time, there was a little girl named Lily. She loved to play "
      "outside in the sun with her friends and her big red ball.",
      /*bos=*/true, /*eos=*/false);
  std::vector<SimRequest> out;
  for (int i = 0; i < n; ++i) {
    SimRequest r;
    r.arrival_step = i * arrival_every;
    r.prompt_tokens.assign(prefix.begin(), prefix.begin() + 40);
    // Request 1's prompt is the prefix and one token: every block it would send is cached.
    const int tail = i == 1 ? 1 : 1 + (i * 5) % 10;
    for (int k = 0; k < tail; ++k) r.prompt_tokens.push_back(20 + (i * 31 + k * 7) % 400);
    r.max_new_tokens = 12 + (i * 7) % 20;
    out.push_back(r);
  }
  return out;
}

class DisaggTokens : public ::testing::TestWithParam<TransferMode> {};

// The decode instance writes the prefill instance's bytes into its own blocks and computes only
// the last prompt token: every request decodes what it generates alone. A prefill pool of 3
// blocks makes later prompts wait for earlier ones' blocks to cross the link.
TEST_P(DisaggTokens, EveryRequestDecodesWhatItGeneratesAlone) {
  const std::vector<SimRequest> requests = test::mixed_requests(8);
  for (const int prefill_blocks : {3, 24}) {
    DisaggRun run(config(64), options(GetParam(), prefill_blocks, 40), Serving::kDisaggregated,
                  test::real_sim_model(), requests);
    run_checked(run);
    ASSERT_NE(run.decode(), nullptr);
    for (int i = 0; i < static_cast<int>(requests.size()); ++i) {
      const RequestRun& r = run.decode()->request(i);
      ASSERT_EQ(r.phase, RequestPhase::kFinished) << "request " << i;
      EXPECT_EQ(r.generated_tokens(), test::generate_alone(requests[static_cast<std::size_t>(i)]))
          << "request " << i << ", prefill pool " << prefill_blocks;
      EXPECT_EQ(run.prefill().request(i).generated, 1);
      EXPECT_FALSE(run.prefill().request(i).held);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, DisaggTokens,
                         ::testing::Values(TransferMode::kLayerWise, TransferMode::kWholeRequest),
                         [](const auto& p) { return transfer_mode_name(p.param); });

// fp16 K/V: one block is 2 (K, V) x layers x KV heads x head_dim x 8 tokens x 2 bytes; every
// prompt token but the last crosses, in whole blocks, once; and the decode instance computes one
// prompt token per request, the prefill instance decodes none.
TEST(Disagg, SendsThePromptBlocksOnceAndTheDecodeInstanceNeverPrefills) {
  const std::vector<SimRequest> requests = test::mixed_requests(6);
  SimConfig c = config(64);
  c.k_format = c.v_format = parse_kv_format("fp16", "test");
  DisaggRun run(c, options(TransferMode::kLayerWise, 24, 64), Serving::kDisaggregated,
                test::real_sim_model(), requests);
  run_checked(run);
  const ModelConfig& m = test::real_model().model->config();
  const std::int64_t block = 2LL * m.n_layers * m.n_kv_heads * m.head_dim() * 8 * 2;
  EXPECT_EQ(run.report().block_bytes, static_cast<double>(block));
  std::int64_t want = 0;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const int prompt = static_cast<int>(requests[i].prompt_tokens.size());
    const std::int64_t bytes = blocks_for(prompt - 1, 8) * block;
    EXPECT_EQ(run.report().requests[i].transfer_bytes, bytes) << "request " << i;
    want += bytes;
  }
  EXPECT_EQ(run.report().transfer_bytes, want);
  // One start and one done event per request, the done at the request's transfer end.
  int starts = 0, dones = 0;
  for (const TransferEvent& e : run.report().transfers) {
    const RequestTiming& t = run.report().requests[static_cast<std::size_t>(e.request)];
    if (e.done) {
      ++dones;
      EXPECT_EQ(e.time, t.transfer_end);
      EXPECT_EQ(e.bytes, t.transfer_bytes);
    } else {
      ++starts;
      EXPECT_EQ(e.time, t.transfer_start);
      EXPECT_LE(t.transfer_start, t.transfer_end);
    }
  }
  EXPECT_EQ(starts, 6);
  EXPECT_EQ(dones, 6);
  ASSERT_NE(run.decode(), nullptr);
  EXPECT_EQ(run.decode()->prefill_tokens_computed(), 6);  // the last prompt token each
  EXPECT_EQ(run.report().instances[1].prefill_tokens, 6);
  EXPECT_EQ(run.report().instances[0].decode_tokens, 0);
}

// One request of 33 tokens, 3 new, blocks of 8: 4 blocks (32 tokens) cross. Whole-request
// transfer: the prefill step, then bytes / bandwidth + latency, then one decode step per token.
// Layer-wise on a link far faster than the step: only the last layer's share is exposed; on a
// far slower one the transfer starts after the first layer and runs link-bound.
TEST(Disagg, TheClockByHand) {
  SimRequest r;
  r.prompt_tokens.assign(33, 5);
  r.prompt_tokens[0] = 1;
  r.max_new_tokens = 3;
  r.arrival_step = 0;
  const ModelConfig& m = test::real_model().model->config();
  const GpuRoofline gpu = parse_gpu("h100", "test");
  const double bpt = 2.0 * m.n_layers * m.n_kv_heads * m.head_dim() * 4;  // fp32
  auto cost = [&](int first, int tokens) {
    const StepRun run{first, tokens};
    return price_step(m, bpt, gpu, std::span<const StepRun>(&run, 1)).seconds;
  };
  const double c0 = cost(0, 33);
  const double bytes = 4 * 8 * bpt;
  const double latency = 7e-6;
  const int layers = m.n_layers;
  struct Case {
    TransferMode mode;
    const char* link;
    double transfer_end;
  };
  const Case cases[] = {
      {TransferMode::kWholeRequest, "1GB/s", c0 + bytes / 1e9 + latency},
      {TransferMode::kLayerWise, "1GB/s", c0 / layers + bytes / 1e9 + latency},
      {TransferMode::kLayerWise, "100000GB/s", c0 + bytes / layers / 1e14 + latency},
  };
  for (const Case& k : cases) {
    DisaggOptions o = options(k.mode, 8, 8);
    o.link = parse_link(k.link, "test");
    o.latency_seconds = latency;
    DisaggRun run(config(8), o, Serving::kDisaggregated, test::real_sim_model(), {r});
    run_checked(run);
    const RequestTiming& t = run.report().requests[0];
    const std::string what = transfer_mode_name(k.mode) + " over " + k.link;
    EXPECT_EQ(t.prefill_start, 0.0) << what;
    EXPECT_DOUBLE_EQ(t.prefill_end, c0) << what;
    EXPECT_NEAR(t.transfer_end, k.transfer_end, 1e-15) << what;
    ASSERT_EQ(t.generated, 3) << what;
    EXPECT_NEAR(t.first_token, t.transfer_end + cost(32, 1), 1e-15) << what;
    EXPECT_NEAR(t.last_token, t.first_token + cost(33, 1) + cost(34, 1), 1e-15) << what;
    EXPECT_EQ(t.transfer_bytes, static_cast<std::int64_t>(bytes)) << what;
  }
  // Colocated: no transfer; the first token ends the prefill step.
  DisaggRun co(config(8), options(TransferMode::kLayerWise, 8, 8), Serving::kColocated,
               test::real_sim_model(), {r});
  run_checked(co);
  const RequestTiming& t = co.report().requests[0];
  EXPECT_DOUBLE_EQ(t.first_token, c0);
  EXPECT_EQ(t.transfer(), 0.0);
  EXPECT_EQ(t.first_decode(), 0.0);
  EXPECT_EQ(co.decode(), nullptr);
}

// The lesson at a published shape (Llama-3-8B, bookkeeping: no weights): colocated, every long
// prompt that arrives stalls the decoding requests for its whole prefill step; disaggregated,
// decode steps stay short, and the price is the transfer in the first token's time.
TEST(Disagg, ColocatedPrefillsStallDecodes) {
  const ModelConfig m = parse_synthetic_spec("llama-3-8b").config;
  std::vector<SimRequest> requests;
  for (int i = 0; i < 12; ++i) {
    SimRequest r;
    r.arrival_step = i;
    r.prompt_tokens.assign(1000, 7);
    r.max_new_tokens = 64;
    requests.push_back(r);
  }
  DisaggOptions o = options(TransferMode::kLayerWise, 2000, 2000);
  o.arrival_interval_seconds = 25e-3;
  SimConfig c = config(2000);
  c.k_format = c.v_format = parse_kv_format("fp16", "test");
  DisaggRun co(c, o, Serving::kColocated, SimModel{m, nullptr}, requests);
  DisaggRun di(c, o, Serving::kDisaggregated, SimModel{m, nullptr}, requests);
  run_checked(co);
  run_checked(di);
  double co_worst = 0, di_worst = 0;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    co_worst = std::max(co_worst, co.report().requests[i].tpot());
    di_worst = std::max(di_worst, di.report().requests[i].tpot());
    EXPECT_GT(di.report().requests[i].transfer(), 0.0);
  }
  // A 1,000-token prefill is ~16 GFLOP x 1,000 / 989 TFLOPS = 16 ms; a decode step reads 16 GB
  // of weights in ~5 ms.
  EXPECT_GT(co_worst, 1.3 * di_worst);
  EXPECT_EQ(di.report().transfer_bytes, 12LL * blocks_for(999, 8) * 8 * m.kv_bytes_per_token(2));
}

// pools_at reads the records: each instance's peak over them is its peak, a transfer is on the
// link just before it is done, and everything is free at the end.
TEST(Disagg, PoolsAtTimeFollowTheRecords) {
  const std::vector<SimRequest> requests = test::mixed_requests(8);
  DisaggRun run(config(64), options(TransferMode::kWholeRequest, 3, 40), Serving::kDisaggregated,
                test::real_sim_model(), requests);
  run_checked(run);
  const DisaggReport& r = run.report();
  std::vector<int> peak(r.instances.size(), 0);
  double last = 0;
  for (const StepRecord& s : r.steps) {
    const PoolsAt p = pools_at(r, s.end);
    const auto i = static_cast<std::size_t>(s.instance);
    peak[i] = std::max(peak[i], p.blocks_used[i]);
    EXPECT_LE(p.blocks_held[i], p.blocks_used[i]);
    last = std::max(last, s.end);
  }
  for (std::size_t i = 0; i < peak.size(); ++i) EXPECT_EQ(peak[i], r.instances[i].peak_blocks_used);
  EXPECT_GT(peak[0], 0);
  int held_seen = 0;
  for (const TransferEvent& e : r.transfers) {
    if (!e.done) continue;
    const PoolsAt p = pools_at(r, std::nextafter(e.time, 0.0));
    EXPECT_GE(p.transfers, 1);
    EXPECT_GE(p.blocks_in_flight, e.blocks);
    held_seen += p.blocks_held[0] > 0 ? 1 : 0;
  }
  EXPECT_GT(held_seen, 0) << "the prefill pool holds blocks while they cross";
  const PoolsAt end = pools_at(r, last);
  EXPECT_EQ(end.blocks_used, std::vector<int>(r.instances.size(), 0));
  EXPECT_EQ(end.transfers, 0);
}

// The block map (record_blocks): at every record's time each instance's map has exactly the
// record's used and held blocks, a held block belongs to a finished prompt on the prefill side,
// and a reserved one to a request the decode instance has not been handed yet; with prefix
// caching the cached blocks nobody holds are counted as used, as the pool counts them.
TEST(Disagg, TheBlockMapAgreesWithThePools) {
  const std::vector<SimRequest> requests = shared_prefix_requests(8, 1);
  SimConfig c = config(64);
  c.prefix_caching = true;
  DisaggOptions o = options(TransferMode::kLayerWise, 16, 40);
  o.arrival_interval_seconds = 3e-6;
  o.record_blocks = true;
  DisaggRun run(c, o, Serving::kDisaggregated, test::real_sim_model(), requests);
  run_checked(run);
  const DisaggReport& r = run.report();
  ASSERT_FALSE(r.block_changes.empty());
  int reserved_seen = 0, held_seen = 0;
  for (const StepRecord& s : r.steps) {
    // Each instance's last record ending at s.end is the one its map shows then.
    const auto later = std::find_if(r.steps.begin(), r.steps.end(), [&](const StepRecord& q) {
      return q.instance == s.instance && q.end == s.end && &q > &s;
    });
    if (later != r.steps.end()) continue;
    const std::vector<BlockOwner> map = blocks_at(r, s.instance, s.end);
    ASSERT_EQ(static_cast<int>(map.size()),
              r.instances[static_cast<std::size_t>(s.instance)].num_blocks);
    int used = 0, held = 0;
    for (const BlockOwner& b : map) {
      used += b.use != BlockUse::kFree ? 1 : 0;
      held += b.use == BlockUse::kHeld ? 1 : 0;
      EXPECT_EQ(b.request >= 0, b.use == BlockUse::kRunning || b.use == BlockUse::kHeld ||
                                    b.use == BlockUse::kReserved);
      if (b.use == BlockUse::kHeld) {
        EXPECT_EQ(s.instance, 0);
      }
      if (b.use == BlockUse::kReserved) {
        EXPECT_EQ(s.instance, 1);
        ++reserved_seen;
      }
    }
    EXPECT_EQ(used, s.blocks_used) << "instance " << s.instance << " at " << s.end;
    EXPECT_EQ(held, s.blocks_held) << "instance " << s.instance << " at " << s.end;
    held_seen += held;
  }
  EXPECT_GT(held_seen, 0);
  EXPECT_GT(reserved_seen, 0);
  // Without record_blocks there is no map.
  o.record_blocks = false;
  DisaggRun plain(c, o, Serving::kDisaggregated, test::real_sim_model(), requests);
  plain.run();
  EXPECT_TRUE(plain.report().block_changes.empty());
}

// Two prompts in one prefill step, layer by layer: the link takes layer l of both before layer
// l + 1 of either, so on a link faster than the step each transfer ends with the step's last
// layer, not the second one after the whole of the first.
TEST(Disagg, OneStepsPromptsShareTheLinkLayerByLayer) {
  SimRequest r;
  r.prompt_tokens.assign(33, 5);
  r.prompt_tokens[0] = 1;
  r.max_new_tokens = 2;
  const ModelConfig& m = test::real_model().model->config();
  const double bpt = 2.0 * m.n_layers * m.n_kv_heads * m.head_dim() * 4;  // fp32
  const double bytes = 4 * 8 * bpt;                                       // 32 tokens each
  const StepRun runs[] = {{0, 33}, {0, 33}};
  const double c0 = price_step(m, bpt, parse_gpu("h100", "test"), runs).seconds;
  // A link that moves one layer's share of both requests in a tenth of a layer's compute.
  const double bw = 2 * bytes / m.n_layers / (c0 / m.n_layers / 10);
  DisaggOptions o = options(TransferMode::kLayerWise, 16, 16);
  o.link = parse_link(std::to_string(bw / 1e9) + "GB/s", "test");
  o.latency_seconds = 0;
  DisaggRun run(config(16), o, Serving::kDisaggregated, test::real_sim_model(), {r, r});
  run_checked(run);
  const double share = bytes / m.n_layers / o.link.bytes_per_second;  // one layer, one request
  for (const RequestTiming& t : run.report().requests) {
    EXPECT_DOUBLE_EQ(t.prefill_end, c0);
    // Its last layer's share leaves at c0, after the other request's at most: across within two
    // shares. Request by request, the second's layers would all wait for the first's last one.
    EXPECT_LE(t.transfer_end, c0 + 2 * share * (1 + 1e-9)) << t.id;
  }
}

// A request longer than the model's context is refused by the colocated run at arrival, and by
// both instances here: it is never prefilled or sent.
TEST(Disagg, ARequestPastTheContextIsRefusedByBothInstances) {
  const ModelConfig& m = test::real_model().model->config();
  std::vector<SimRequest> requests = test::mixed_requests(2);
  requests[1].max_new_tokens = m.seq_len;  // prompt + max_new - 1 > seq_len
  DisaggRun di(config(128), options(TransferMode::kLayerWise, 64, 128), Serving::kDisaggregated,
               test::real_sim_model(), requests);
  run_checked(di);
  EXPECT_EQ(di.prefill().request(1).phase, RequestPhase::kRejected);
  ASSERT_NE(di.decode(), nullptr);
  EXPECT_EQ(di.decode()->request(1).phase, RequestPhase::kRejected);
  EXPECT_EQ(di.report().requests[1].generated, 0);
  EXPECT_EQ(di.report().requests[1].transfer_bytes, 0);
  const int prompt0 = static_cast<int>(requests[0].prompt_tokens.size());
  EXPECT_EQ(di.report().transfer_bytes,
            static_cast<std::int64_t>(blocks_for(prompt0 - 1, 8) * di.report().block_bytes));
  EXPECT_EQ(summarize(di.report()).finished, 1);
}

TEST(Disagg, RefusesWhatItCannotRun) {
  const std::vector<SimRequest> requests = test::mixed_requests(2);
  const SimModel model = test::real_sim_model();
  SimConfig kivi = config(32);
  kivi.k_format = kivi.v_format = parse_kv_format("kivi2", "test");
  EXPECT_NE(test::error_of([&] {
              DisaggRun run(kivi, options(TransferMode::kLayerWise, 32, 32),
                            Serving::kDisaggregated, model, requests);
            }).find("cache.kv_dtype: expected a KV format without per-sequence staging"),
            std::string::npos);
  std::vector<SimRequest> long_prompt = requests;
  long_prompt[1].prompt_tokens.assign(20, 5);
  const std::string small = test::error_of([&] {
    DisaggRun run(config(32), options(TransferMode::kLayerWise, 2, 32), Serving::kDisaggregated,
                  model, long_prompt);
  });
  // 20 prompt tokens need 3 blocks of 8.
  EXPECT_EQ(small,
            "cache.disaggregation.prefill_blocks (or --prefill-blocks): expected a prefill pool "
            "that holds requests[1]'s prompt (20 tokens: 3 blocks), got 2");
  std::vector<SimRequest> samples = requests;
  samples[1].n_samples = 2;
  EXPECT_NE(test::error_of([&] {
              DisaggRun run(config(32), options(TransferMode::kLayerWise, 32, 32),
                            Serving::kDisaggregated, model, samples);
            }).find("requests[1].n: expected 1"),
            std::string::npos);
}

// The Simulator's part, without weights: a delivered request with K/V from elsewhere computes
// only the rest of its prompt, and a held request keeps its blocks until released.
TEST(Disagg, DeliverKvInAndHold) {
  const ModelConfig& m = test::real_model().model->config();
  SimRequest r;
  r.prompt_tokens.assign(12, 3);
  r.max_new_tokens = 2;
  r.external_arrival = true;
  r.kv_in_tokens = 10;
  SimRequest h;
  h.prompt_tokens.assign(5, 3);
  h.max_new_tokens = 1;
  h.hold_blocks = true;
  Simulator sim(config(8), SimModel{m, nullptr}, {r, h});
  ASSERT_TRUE(sim.step());
  EXPECT_FALSE(sim.request(0).arrived);
  ASSERT_EQ(sim.last_plan().entries.size(), 1U);  // h alone: its prompt
  EXPECT_TRUE(sim.request(1).held);
  EXPECT_EQ(sim.cache().pool().num_used(), 1);
  sim.check_invariants();
  sim.deliver(0);
  ASSERT_TRUE(sim.step());
  ASSERT_EQ(sim.last_plan().entries.size(), 1U);
  EXPECT_EQ(sim.last_plan().entries[0].tokens, 2);  // 12 - 10
  EXPECT_EQ(sim.request(0).num_computed, 12);
  sim.check_invariants();
  sim.release(1);
  EXPECT_FALSE(sim.request(1).held);
  EXPECT_THROW(sim.release(1), InternalError);
  EXPECT_THROW(sim.deliver(0), InternalError);
  while (sim.step()) sim.check_invariants();
  EXPECT_EQ(sim.request(0).generated, 2);
  EXPECT_EQ(sim.cache().pool().num_used(), 0);
}

// The decode instance's prefix cache: once request 0's K/V has arrived, every later request finds
// the shared 5 blocks there, and only its blocks after them cross (request 1, whose prompt is the
// prefix and one token, sends none). The decode instance computes one prompt token per request
// and every request decodes what it generates alone.
TEST(Disagg, TheDecodeInstancesPrefixCacheKeepsSharedBlocksOffTheLink) {
  const std::vector<SimRequest> requests = shared_prefix_requests(6, 1);
  SimConfig c = config(64);
  c.prefix_caching = true;
  DisaggOptions o = options(TransferMode::kLayerWise, 24, 40);
  o.arrival_interval_seconds = 1.0;  // each request is done before the next arrives
  DisaggRun run(c, o, Serving::kDisaggregated, test::real_sim_model(), requests);
  run_checked(run);
  const DisaggReport& rep = run.report();
  EXPECT_TRUE(rep.decode_prefix_caching);
  const auto block = static_cast<std::int64_t>(rep.block_bytes);
  int cached_total = 0;
  for (int i = 0; i < static_cast<int>(requests.size()); ++i) {
    const RequestTiming& t = rep.requests[static_cast<std::size_t>(i)];
    const int prompt = static_cast<int>(requests[static_cast<std::size_t>(i)].prompt_tokens.size());
    const int cached = i == 0 ? 0 : 5;
    EXPECT_EQ(t.decode_cached_blocks, cached) << "request " << i;
    EXPECT_EQ(t.transfer_blocks, blocks_for(prompt - 1, 8) - cached) << "request " << i;
    EXPECT_EQ(t.transfer_bytes, t.transfer_blocks * block) << "request " << i;
    cached_total += cached;
    const RequestRun& r = run.decode()->request(i);
    ASSERT_EQ(r.phase, RequestPhase::kFinished) << "request " << i;
    EXPECT_EQ(r.generated_tokens(), test::generate_alone(requests[static_cast<std::size_t>(i)]))
        << "request " << i;
  }
  EXPECT_EQ(rep.requests[1].transfer_blocks, 0);
  EXPECT_EQ(rep.decode_cached_blocks, cached_total);
  EXPECT_EQ(run.decode()->prefill_tokens_computed(), 6);
  // Off, every prompt block crosses, and the tokens are the same.
  o.decode_prefix_caching = false;
  DisaggRun off(c, o, Serving::kDisaggregated, test::real_sim_model(), requests);
  run_checked(off);
  EXPECT_EQ(off.report().transfer_bytes, rep.transfer_bytes + cached_total * block);
  for (int i = 0; i < static_cast<int>(requests.size()); ++i) {
    EXPECT_EQ(off.decode()->request(i).generated_tokens(),
              run.decode()->request(i).generated_tokens());
  }
}

// Arrivals close together into decode pools from too small to ample: reservations refused (the
// pool could not admit the largest request beside them) or taken while other requests' K/V is
// still on the link, admissions that find more cached than their reservation (blocks that arrived
// meanwhile: the wire's copies are skipped), preemption on the decode instance. Invariants hold
// after every step and every request decodes what it would alone.
TEST_P(DisaggTokens, ADecodePrefixCacheUnderPressureKeepsTheTokens) {
  const std::vector<SimRequest> requests = shared_prefix_requests(8, 1);
  SimConfig c = config(64);
  c.prefix_caching = true;
  int reserved = 0, found_more = 0, preemptions = 0;
  for (const double every : {0.0, 2e-6, 3e-6}) {
    for (const int decode_blocks : {14, 17, 20, 40}) {
      DisaggOptions o = options(GetParam(), 16, decode_blocks);
      o.arrival_interval_seconds = every;
      DisaggRun run(c, o, Serving::kDisaggregated, test::real_sim_model(), requests);
      run_checked(run);
      for (int i = 0; i < static_cast<int>(requests.size()); ++i) {
        const RequestRun& r = run.decode()->request(i);
        ASSERT_EQ(r.phase, RequestPhase::kFinished) << "request " << i;
        EXPECT_EQ(r.generated_tokens(), test::generate_alone(requests[static_cast<std::size_t>(i)]))
            << "request " << i << ", decode pool " << decode_blocks << ", every " << every;
        const int cached = run.report().requests[static_cast<std::size_t>(i)].decode_cached_blocks;
        reserved += cached;
        if (r.prefix_hit_tokens / 8 > cached) ++found_more;
        preemptions += r.preemptions;
      }
      // Done: the decode pool holds only what its cache keeps.
      EXPECT_EQ(run.decode()->cache().pool().num_used(),
                run.decode()->prefix_cache()->num_cached());
    }
  }
  EXPECT_GT(reserved, 0);
  EXPECT_GT(found_more, 0);
  EXPECT_GT(preemptions, 0);
}

// Scheduler::reserve_prefix: only before delivery, only with prefix caching and K/V from
// elsewhere, once; the blocks it maps stay referenced until the request is admitted on them.
TEST(Disagg, ReservePrefixMapsCachedBlocksBeforeDelivery) {
  const ModelConfig& m = test::real_model().model->config();
  SimRequest first;
  first.prompt_tokens.assign(20, 3);
  first.max_new_tokens = 1;
  SimRequest later = first;
  later.prompt_tokens.push_back(4);
  later.external_arrival = true;
  later.kv_in_tokens = 20;
  later.max_new_tokens = 2;
  SimConfig c = config(8);
  c.prefix_caching = true;
  Simulator sim(c, SimModel{m, nullptr}, {first, later});
  while (sim.request(0).phase != RequestPhase::kFinished) ASSERT_TRUE(sim.step());
  EXPECT_EQ(sim.reserve_prefix(1), 2);  // 16 of its 20 K/V tokens, in whole blocks
  EXPECT_TRUE(sim.request(1).reserved);
  EXPECT_THROW(sim.reserve_prefix(1), InternalError);
  EXPECT_THROW(sim.reserve_prefix(0), InternalError);
  sim.check_invariants();
  for (const BlockId b : sim.cache().table(SeqId(1)).blocks)
    EXPECT_EQ(sim.prefix_cache()->sequence_refs(b), 1);
  sim.deliver(1);
  ASSERT_TRUE(sim.step());
  sim.check_invariants();
  ASSERT_EQ(sim.last_plan().entries.size(), 1U);
  EXPECT_EQ(sim.last_plan().entries[0].tokens, 1);  // 21 - 20: the last prompt token
  EXPECT_FALSE(sim.request(1).reserved);
  EXPECT_EQ(sim.request(1).prefix_hit_tokens, 16);
  while (sim.step()) sim.check_invariants();
  EXPECT_EQ(sim.request(1).generated, 2);
  Simulator plain(config(8), SimModel{m, nullptr}, {first, later});
  EXPECT_THROW(plain.reserve_prefix(1), InternalError);  // no prefix cache
}

}  // namespace
}  // namespace kvscope

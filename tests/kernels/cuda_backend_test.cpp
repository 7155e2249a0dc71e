// The CUDA backend on the device under test (tests/kernels/device_under_test.h): the emulated
// device (--backend cuda-sim: the runtime/cuBLAS stand-ins and the SIMT emulator) by default, a
// GPU with KVSCOPE_TEST_DEVICE=cuda (scripts/gpu-check.sh). DeviceBackend.* hold on both;
// CudaSimBackend.* read the emulator's own memory accounting. Greedy tokens and
// logits match the CPU backend's on stories260K with fp32 and fp16 GEMM weights; a batched step
// of three sequences in a paged pool matches the CPU's; the backend owns its device memory (the
// pool's bytes included: copy-on-write and swap reach the device copy) and gives it all back;
// KIVI runs on the device; what it does not cover is refused with a one-line error, never
// computed wrongly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>

#include "engine/backend/op_by_op.h"
#include "engine/common/error.h"
#include "engine/evict/token_evictor.h"
#include "engine/infer/generate.h"
#include "engine/infer/transformer.h"
#include "engine/kv/cache_manager.h"
#include "engine/mla/mla_codec.h"
#include "engine/model/sampler.h"
#include "engine/sched/simulator.h"
#include "kernels/backend/cuda_backend.h"
#include "kernels/sim/cuda_api_sim.h"
#include "tests/kernels/device_under_test.h"
#include "tests/sched/sim_test_support.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

double max_abs_diff(const std::vector<std::vector<float>>& a,
                    const std::vector<std::vector<float>>& b) {
  double worst = 0.0;
  for (std::size_t s = 0; s < a.size(); ++s) {
    for (std::size_t v = 0; v < a[s].size(); ++v)
      worst = std::max(worst, double(std::fabs(a[s][v] - b[s][v])));
  }
  return worst;
}

TEST(DeviceBackend, GreedyTokensAndLogitsMatchTheCpuOnTheRealModel) {
  const auto& m = test::real_model();
  auto cpu = make_cpu_backend(1);
  Transformer on_cpu(m.model, *cpu);
  GenerateOptions o;  // greedy, fp32 K/V
  std::vector<std::vector<float>> cpu_logits;
  const int steps = 16;  // slow under AddressSanitizer (a fiber switch per warp collective)
  const std::vector<int> want = generate_tokens(on_cpu, {}, steps, o, &cpu_logits);
  // fp32 GEMMs differ from the CPU only in summation order; fp16 weights and activations round
  // every operand to 11 significant bits (fp32 accumulation).
  for (const auto& [type, tolerance] : {std::pair{GemmType::kF32, 1e-3}, {GemmType::kF16, 0.05}}) {
    auto sim = test::device_backend(type);
    EXPECT_EQ(sim->name(), test::device_name());
    Transformer on_sim(m.model, *sim);
    std::vector<std::vector<float>> sim_logits;
    const std::vector<int> got = generate_tokens(on_sim, {}, steps, o, &sim_logits);
    EXPECT_EQ(got, want) << gemm_type_name(type);
    ASSERT_EQ(sim_logits.size(), cpu_logits.size());
    const double worst = max_abs_diff(sim_logits, cpu_logits);
    EXPECT_LT(worst, tolerance) << gemm_type_name(type);
    std::printf("[%s %s] %d greedy tokens equal the CPU's; max |logit diff| %.2e\n",
                test::device_name(), gemm_type_name(type), steps - 1, worst);
  }
}

// SmolLM2-135M (GQA 9/3, 30 layers, its weights dequantized to fp32 and then rounded to fp16 on
// the device): the first greedy tokens from a prompt equal the CPU's. 32 tokens; under
// AddressSanitizer, where every fiber switch of the emulator costs far more, 8 tokens with fp32
// GEMMs (fp16 GEMMs are covered there on stories260K).
TEST(DeviceBackend, SmolLM2sGreedyTokensEqualTheCpus) {
#if defined(__SANITIZE_ADDRESS__)
  const int steps = 8;
  const GemmType weights = GemmType::kF32;  // converting 135M weights on the emulator: minutes
#else
  const int steps = 32;
  const GemmType weights = GemmType::kF16;
#endif
  const auto& m = test::smollm2();
  const std::vector<int> prompt = m.tokenizer->encode("The capital of France is", false, false);
  auto cpu = make_cpu_backend(1);
  auto sim = test::device_backend(weights);
  Transformer on_cpu(m.model, *cpu), on_sim(m.model, *sim);
  GenerateOptions o;
  o.start_token = m.tokenizer->bos_id();
  o.stop_at_bos = false;
  const int total = 1 + static_cast<int>(prompt.size()) + steps;
  EXPECT_EQ(generate_tokens(on_sim, prompt, total, o, nullptr),
            generate_tokens(on_cpu, prompt, total, o, nullptr));
}

// Quantized K/V: the kernels quantize on write and dequantize in attention exactly as the CPU
// does, so each format's greedy tokens are the CPU's with that format.
TEST(DeviceBackend, QuantizedKvFormatsGiveTheCpusTokens) {
  const auto& m = test::real_model();
  auto cpu = make_cpu_backend(1);
  auto sim = test::device_backend(GemmType::kF32);
  Transformer on_cpu(m.model, *cpu), on_sim(m.model, *sim);
  for (const char* name : {"fp16", "bf16", "int8", "fp8-e4m3", "fp8-e5m2", "int4", "int2-g8"}) {
    GenerateOptions o;
    o.k_format = o.v_format = parse_kv_format(name, "test");
    EXPECT_EQ(generate_tokens(on_sim, {}, 24, o, nullptr),
              generate_tokens(on_cpu, {}, 24, o, nullptr))
        << name;
  }
}

// KIVI: each token joins its group's full-precision rows on the device, a filled group is
// quantized there (keys per channel, values per token), and attention reads both; the greedy
// tokens are the CPU's with groups of 32 and 16 over tiles of 16 and 64 tokens, past several
// hand-overs (70 tokens: kivi2's differ from fp32's from the 50th on; 40 under AddressSanitizer,
// where each emulated launch costs far more, still past a group's hand-over).
TEST(DeviceBackend, KiviFormatsGiveTheCpusTokens) {
#if defined(__SANITIZE_ADDRESS__)
  const int steps = 40;
#else
  const int steps = 70;
#endif
  const auto& m = test::real_model();
  auto cpu = make_cpu_backend(1);
  auto sim = test::device_backend(GemmType::kF32);
  Transformer on_cpu(m.model, *cpu), on_sim(m.model, *sim);
  struct Case {
    const char* format;
    int block_size;
  };
  for (const Case c : {Case{"kivi2", 16}, Case{"kivi4", 64}, Case{"kivi4-r16", 16}}) {
    GenerateOptions o;
    o.k_format = o.v_format = parse_kv_format(c.format, "test");
    o.block_size = c.block_size;
    o.allocator = AllocatorKind::kPaged;
    const std::vector<int> want = generate_tokens(on_cpu, {}, steps, o, nullptr);
    EXPECT_EQ(generate_tokens(on_sim, {}, steps, o, nullptr), want)
        << c.format << " block size " << c.block_size;
  }
  // Only K in KIVI: V goes through the per-token write kernel as before.
  GenerateOptions mixed;
  mixed.k_format = parse_kv_format("kivi2", "test");
  mixed.v_format = parse_kv_format("int8", "test");
  EXPECT_EQ(generate_tokens(on_sim, {}, 40, mixed, nullptr),
            generate_tokens(on_cpu, {}, 40, mixed, nullptr));
}

// Attention capture (the heatmaps, sink shares, H2O/TOVA scores): the softmax rows the kernel
// writes are the CPU's, for every layer, head and position.
TEST(DeviceBackend, CapturedAttentionRowsAreTheCpus) {
  struct Rows : AttentionObserver {
    std::vector<float> all;
    int calls = 0;
    void on_attention(int layer, int head, int pos, std::span<const float> w) override {
      ++calls;
      all.push_back(static_cast<float>(layer * 1000 + head * 10 + pos));  // the order, too
      all.insert(all.end(), w.begin(), w.end());
    }
  };
  const auto& m = test::real_model();
  const ModelConfig& c = m.model->config();
  auto cpu = make_cpu_backend(1);
  auto sim = test::device_backend(GemmType::kF32);
  Rows rows[2];
  const KvFormat f = parse_kv_format("int8", "test");
  for (int which = 0; which < 2; ++which) {
    Transformer t(m.model, which == 0 ? *cpu : *sim);
    KvCacheManager cache({c.n_layers, c.n_kv_heads, c.head_dim(), 4, 8, f, f},
                         AllocatorKind::kPaged, c.seq_len, true);
    cache.require_add_sequence(SeqId(0));
    for (int pos = 0; pos < 6; ++pos) {
      cache.require_append_slots(SeqId(0), 1);
      t.forward(10 + pos, pos, cache.view(SeqId(0)), &rows[which]);
    }
  }
  EXPECT_EQ(rows[1].calls, c.n_layers * c.n_heads * 6);
  ASSERT_EQ(rows[1].all.size(), rows[0].all.size());
  for (std::size_t i = 0; i < rows[0].all.size(); ++i)
    ASSERT_NEAR(rows[1].all[i], rows[0].all[i], 1e-4) << i;  // later layers: GEMM sum orders
}

namespace {

// Runs `requests` under `c` on the CPU and on the emulated device (fp32 GEMM weights): every
// request finishes with the CPU's tokens. Returns the device's run.
std::unique_ptr<Simulator> run_on_both(const SimConfig& c,
                                       const std::vector<SimRequest>& requests) {
  auto on_cpu = std::make_unique<Simulator>(c, test::real_sim_model(), requests);
  test::run_checked(*on_cpu);
  SimConfig d = c;
  d.make_backend = [] { return test::device_backend(GemmType::kF32); };
  auto on_sim = std::make_unique<Simulator>(d, test::real_sim_model(), requests);
  test::run_checked(*on_sim);
  EXPECT_EQ(on_sim->num_requests(), on_cpu->num_requests());
  for (int i = 0; i < on_cpu->num_requests(); ++i) {
    EXPECT_EQ(on_sim->request(i).phase, RequestPhase::kFinished) << i;
    EXPECT_EQ(on_sim->request(i).generated_tokens(), on_cpu->request(i).generated_tokens()) << i;
  }
  return on_sim;
}

}  // namespace

// The Simulator on the emulated device gives every request the CPU Simulator's tokens. Run 1:
// requests in a pool too small for them (several running at once, recompute preemption, chunked
// prefill): ten requests in 16 blocks; under AddressSanitizer, where each emulated launch costs
// far more, four in 10 blocks. Run 2 moves bytes inside the device pool: prefix caching (a later
// request repeats an earlier prompt), parallel samples (copy-on-write of the shared prompt
// block) and swap preemption (blocks read out to the host tier and written back).
TEST(DeviceBackend, AMultiRequestSimulatorRunGivesTheCpusTokens) {
#if defined(__SANITIZE_ADDRESS__)
  const int n = 4, blocks = 10;
#else
  const int n = 10, blocks = 16;
#endif
  SimConfig c;
  c.block_size = 8;
  c.num_blocks = blocks;
  c.max_tokens_per_step = 12;
  const auto recomputing = run_on_both(c, test::mixed_requests(n));
  EXPECT_GT(recomputing->timeline()->all_metrics().back().preemptions, 0);

  auto requests = test::mixed_requests(3);
#if defined(__SANITIZE_ADDRESS__)
  const int max_new = 18;
#else
  const int max_new = 24;
#endif
  for (SimRequest& r : requests) r.max_new_tokens = std::min(r.max_new_tokens, max_new);
  requests[0].n_samples = 2;  // 5 prompt tokens: the fork copies the partial block on write
  requests.push_back(requests[2]);
  requests.back().arrival_step = 30;  // after request 2 cached its prompt's full block
  c.block_size = 4;  // the prompts' full blocks are cached, their last partial one shared
  c.num_blocks = 16;
  c.prefix_caching = true;
  c.preemption = PreemptionMode::kSwap;
  c.host_blocks = 16;
  const auto moving = run_on_both(c, requests);
  std::map<EventType, int> seen;
  for (const Event& e : moving->timeline()->events()) ++seen[e.type];
  EXPECT_GT(seen[EventType::kBlockCopiedOnWrite], 0);
  EXPECT_GT(seen[EventType::kSwappedIn], 0);
  EXPECT_GT(moving->prefix_cache()->metrics().hit_tokens, 0);
}

// Token eviction on the device: attention masks the evicted slots, compaction moves slots in the
// device's pool, and the position shift re-rotates the device's keys (kv_rotate_keys_kernel).
// H2O reads the kernel's captured attention rows; window + sinks keeps the original positions.
TEST(DeviceBackend, TokenEvictionOnTheDeviceGivesTheCpusTokens) {
#if defined(__SANITIZE_ADDRESS__)
  const int max_new = 24;  // each emulated launch costs far more under AddressSanitizer
#else
  const int max_new = 40;
#endif
  auto requests = test::mixed_requests(3);
  for (SimRequest& r : requests) r.max_new_tokens = std::min(r.max_new_tokens, max_new);
  SimConfig c;
  c.block_size = 4;
  c.num_blocks = 40;
  c.k_format = c.v_format = parse_kv_format("int8", "test");
  c.token_eviction.policy.kind = EvictionKind::kH2O;
  c.token_eviction.policy.budget = 12;
  c.token_eviction.policy.recent = 4;
  c.token_eviction.compaction = CompactionPolicy::kAlways;
  c.token_eviction.positions = PositionMode::kShift;
  const auto h2o = run_on_both(c, requests);
  std::map<EventType, int> seen;
  for (const Event& e : h2o->timeline()->events()) ++seen[e.type];
  EXPECT_GT(seen[EventType::kTokensEvicted], 0);
  EXPECT_GT(seen[EventType::kSlotMoved], 0);

  c.k_format = c.v_format = parse_kv_format("fp16", "test");
  c.token_eviction.policy.kind = EvictionKind::kSinksWindow;
  c.token_eviction.policy.sinks = 2;
  c.token_eviction.compaction = CompactionPolicy::kNever;
  c.token_eviction.positions = PositionMode::kKeep;
  run_on_both(c, requests);
}

// The position shift on a pool the device holds: the kernel rotates the device's keys (the host
// tiles are not written, nor counted as written behind its back) to what the CPU's host path
// gives, within a quantization step.
TEST(DeviceBackend, ThePositionShiftRotatesTheDevicesKeys) {
  const auto& m = test::real_model();
  const ModelConfig& c = m.model->config();
  auto sim = test::device_backend(GemmType::kF32);
  auto cpu = make_cpu_backend(1);
  const KvFormat f = parse_kv_format("int8", "test");
  const KvLayout layout{c.n_layers, c.n_kv_heads, c.head_dim(), 4, 12, f, f};
  EvictorOptions o;
  o.policy.kind = EvictionKind::kWindow;
  o.policy.budget = 6;
  o.compaction = CompactionPolicy::kAlways;
  o.positions = PositionMode::kShift;
  KvCacheManager on_device(layout, AllocatorKind::kPaged, c.seq_len, true);
  KvCacheManager on_host(layout, AllocatorKind::kPaged, c.seq_len, true);
  long rotated[2] = {0, 0};
  for (KvCacheManager* cache : {&on_device, &on_host}) {
    const bool device = cache == &on_device;
    Transformer t(m.model, device ? *sim : *cpu);
    cache->require_add_sequence(SeqId(0));
    TokenEvictor evictor(*cache, SeqId(0), o, c.rope_theta, device ? *sim : *cpu);
    for (int i = 0; i < 20; ++i) {
      cache->require_append_slots(SeqId(0), 1);
      const int pos = evictor.next_position();
      t.forward(20 + i, pos, evictor.view());
      evictor.after_token(nullptr);
    }
    rotated[device ? 0 : 1] = evictor.counters().keys_rotated;
  }
  EXPECT_GT(rotated[0], 0);
  EXPECT_EQ(rotated[0], rotated[1]);
  // Both pools hold the same K/V in every live row (the device's read back block by block), up to
  // int8 codes one step apart: the two ropes differ in their last bits, and so, slightly, does
  // everything computed after the first shift.
  const std::vector<BlockId>& blocks = on_host.table(SeqId(0)).blocks;
  ASSERT_EQ(blocks, on_device.table(SeqId(0)).blocks);
  const int kv_dim = c.n_kv_heads * c.head_dim(), live = on_host.table(SeqId(0)).num_tokens;
  ASSERT_EQ(live, o.policy.budget - 1);
  const std::size_t kt = layout.tile_bytes(KvKind::kKey), vt = layout.tile_bytes(KvKind::kValue);
  long differ = 0, codes = 0;
  for (std::size_t j = 0; j < blocks.size(); ++j) {
    std::vector<std::byte> dev(layout.block_bytes()), host(layout.block_bytes());
    on_device.storage()->read_block(blocks[j], dev.data());
    on_host.storage()->read_block(blocks[j], host.data());
    for (int layer = 0; layer < layout.n_layers; ++layer) {  // [n_layers][K tile, V tile]
      for (std::size_t at : {static_cast<std::size_t>(layer) * (kt + vt),
                             static_cast<std::size_t>(layer) * (kt + vt) + kt}) {
        for (int r = 0; r < layout.block_size; ++r) {
          if (static_cast<int>(j) * layout.block_size + r >= live) break;
          for (int i = 0; i < kv_dim; ++i, ++codes) {
            const std::size_t x = at + static_cast<std::size_t>(r) * kv_dim + i;
            const int d = static_cast<int>(static_cast<signed char>(dev[x])) -
                          static_cast<int>(static_cast<signed char>(host[x]));
            ASSERT_LE(std::abs(d), 1) << "block " << j << " layer " << layer << " row " << r;
            differ += d != 0;
          }
        }
      }
    }
  }
  EXPECT_LE(differ, codes / 50) << "codes one step apart, of " << codes;
}

TEST(DeviceBackend, ABatchedStepOfThreeSequencesInAPagedPoolMatchesTheCpu) {
  const auto& m = test::real_model();
  const ModelConfig& c = m.model->config();
  auto cpu = make_cpu_backend(1);
  auto sim = test::device_backend(GemmType::kF32);
  const KvFormat f = parse_kv_format("fp32", "test");
  const KvLayout layout{c.n_layers, c.n_kv_heads, c.head_dim(), 4, 64, f, f};
  std::vector<std::vector<float>> logits[2];
  for (int which = 0; which < 2; ++which) {
    Transformer t(m.model, which == 0 ? *cpu : *sim);
    KvCacheManager cache(layout, AllocatorKind::kPaged, c.seq_len, true);
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> tok(1, c.vocab_size - 1);
    for (int s = 0; s < 3; ++s) cache.require_add_sequence(SeqId(s));
    // Three sequences of different lengths, advanced together: each step holds one token of
    // each, so their blocks interleave in the pool and every block table is scattered.
    for (int pos = 0; pos < 9; ++pos) {
      std::vector<StepToken> step;
      for (int s = 0; s < 3; ++s) {
        if (pos > 4 + 2 * s) continue;
        cache.require_append_slots(SeqId(s), 1);
        step.push_back({tok(rng), pos, cache.view(SeqId(s)), true, nullptr});
      }
      const std::span<float> l = t.forward_step(step);
      logits[which].emplace_back(l.begin(), l.end());
    }
  }
  EXPECT_LT(max_abs_diff(logits[1], logits[0]), 1e-3);
}

namespace {

// Every softmax row an observer is handed, in order, with its (layer, head, position).
struct AllRows : AttentionObserver {
  std::vector<float> all;
  void on_attention(int layer, int head, int pos, std::span<const float> w) override {
    all.push_back(static_cast<float>(layer * 1000 + head * 10 + pos));
    all.insert(all.end(), w.begin(), w.end());
  }
};

// Three sequences in one paged pool through `t`: a prefill chunk of sequence 0 (only its last
// token's logits wanted) beside the first tokens of the others, then decode steps of all three,
// sequence 1's attention captured. Returns every step's logits.
std::vector<std::vector<float>> three_sequences(Transformer& t, const KvFormat& f,
                                                AllRows* captured, int chunk, int decode_steps) {
  const ModelConfig& c = t.config();
  KvCacheManager cache({c.n_layers, c.n_kv_heads, c.head_dim(), 4, 64, f, f}, AllocatorKind::kPaged,
                       c.seq_len, true);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> tok(1, c.vocab_size - 1);
  for (int s = 0; s < 3; ++s) cache.require_add_sequence(SeqId(s));
  std::vector<std::vector<float>> out;
  std::vector<StepToken> step;
  cache.require_append_slots(SeqId(0), chunk);
  KvSeqView view = cache.view(SeqId(0));
  for (int pos = 0; pos < chunk; ++pos) {
    view.num_slots = pos + 1;  // writes its own slot, sees those before it
    step.push_back({tok(rng), pos, view, pos == chunk - 1, nullptr});
  }
  for (int s = 1; s < 3; ++s) {
    cache.require_append_slots(SeqId(s), 1);
    step.push_back({tok(rng), 0, cache.view(SeqId(s)), true, s == 1 ? captured : nullptr});
  }
  for (int i = 0; i < decode_steps; ++i) {
    const std::span<float> l = t.forward_step(step);
    out.emplace_back(l.begin(), l.end());
    step.clear();
    for (int s = 0; s < 3; ++s) {
      cache.require_append_slots(SeqId(s), 1);
      const int pos = (s == 0 ? chunk : 1) + i;
      step.push_back({tok(rng), pos, cache.view(SeqId(s)), true, s == 1 ? captured : nullptr});
    }
  }
  return out;
}

}  // namespace

// The CUDA backend runs a step whole on the device (Backend::run_step): activations never come
// back to the host between ops. Each op is the kernel or GEMM its op-level method runs, in the
// same order, and the residual adds are GEMMs with beta = 1, so on the emulated device the
// logits and captured attention rows are bit for bit those of the same backend driven one op
// at a time (OpByOp), with fp32 and fp16 GEMMs, per-token and KIVI formats (KIVI's waves). A
// chunk of 6 then 12 decode steps; under AddressSanitizer, where each emulated launch costs far
// more, a chunk of 10 then 6 (sequence 0 still fills KIVI's group of 16, which hands over).
TEST(DeviceBackend, TheWholeStepOnTheDeviceEqualsItsOpsOneByOne) {
#if defined(__SANITIZE_ADDRESS__)
  const int chunk = 10, decode_steps = 6;
#else
  const int chunk = 6, decode_steps = 12;
#endif
  const auto& m = test::real_model();
  struct Case {
    GemmType gemm;
    const char* format;
  };
  for (const Case k : {Case{GemmType::kF32, "fp32"}, Case{GemmType::kF16, "int8"},
                       Case{GemmType::kF32, "kivi4-r16"}}) {
    auto whole = test::device_backend(k.gemm);
    auto inner = test::device_backend(k.gemm);
    OpByOp ops(*inner);
    Transformer on_device(m.model, *whole), op_by_op(m.model, ops);
    const KvFormat f = parse_kv_format(k.format, "test");
    AllRows rows[2];
    const auto got = three_sequences(on_device, f, &rows[0], chunk, decode_steps);
    const auto want = three_sequences(op_by_op, f, &rows[1], chunk, decode_steps);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], want[i]) << k.format << " step " << i;
    EXPECT_FALSE(rows[0].all.empty());
    EXPECT_EQ(rows[0].all, rows[1].all) << k.format;
  }
}

// What a decode step of four sequences copies between host and device: the whole step sends the
// token embeddings and the step's metadata (positions, block tables, attention's per-query
// table) up and reads only the logits back; op by op, every op's inputs go up and its outputs
// come back, a number of copies that grows with the layers.
TEST(DeviceBackend, AStepSendsEmbeddingsUpAndReadsOnlyLogitsBack) {
  const auto& m = test::real_model();
  const ModelConfig& c = m.model->config();
  const int seqs = 4;
  device::Traffic per_step[2];
  for (int path = 0; path < 2; ++path) {
    auto sim = test::device_backend(GemmType::kF32);
    OpByOp ops(*sim);
    Transformer t(m.model, path == 0 ? *sim : static_cast<Backend&>(ops));
    const KvFormat f = parse_kv_format("fp16", "test");
    KvCacheManager cache({c.n_layers, c.n_kv_heads, c.head_dim(), 16, 16, f, f},
                         AllocatorKind::kPaged, c.seq_len, true);
    std::vector<StepToken> step(seqs);
    for (int s = 0; s < seqs; ++s) cache.require_add_sequence(SeqId(s));
    for (int pos = 0; pos < 3; ++pos) {
      for (int s = 0; s < seqs; ++s) {
        cache.require_append_slots(SeqId(s), 1);
        step[static_cast<std::size_t>(s)] = {1 + s, pos, cache.view(SeqId(s)), true, nullptr};
      }
      const device::Traffic before = cuda_traffic(*sim).value();
      t.forward_step(step);
      const device::Traffic after = cuda_traffic(*sim).value();
      per_step[path] = {after.to_device_bytes - before.to_device_bytes,
                        after.to_device_copies - before.to_device_copies,
                        after.to_host_bytes - before.to_host_bytes,
                        after.to_host_copies - before.to_host_copies};
    }
  }
  EXPECT_FALSE(cuda_traffic(*make_cpu_backend(1)).has_value());
  const device::Traffic& whole = per_step[0];
  const std::uint64_t logits = static_cast<std::uint64_t>(seqs) * c.vocab_size * 4;
  EXPECT_EQ(whole.to_host_copies, 1u);
  EXPECT_EQ(whole.to_host_bytes, logits);
  // Up: embeddings [4][dim] and positions, once; the block tables and the attention batch's
  // tables and per-query metadata, once per step whatever the layers (at most five copies).
  const std::uint64_t embeddings = static_cast<std::uint64_t>(seqs) * c.dim * 4;
  EXPECT_LE(whole.to_device_copies, 5u);
  EXPECT_GE(whole.to_device_bytes, embeddings);
  EXPECT_LE(whole.to_device_bytes, embeddings + 1024);
  const device::Traffic& ops = per_step[1];
  EXPECT_GT(ops.to_host_copies, static_cast<std::uint64_t>(c.n_layers) * 4);
  EXPECT_GT(ops.to_host_bytes, 2 * logits);
  std::printf(
      "[%s] a decode step of %d sequences, %d layers: whole step %llu copies up "
      "(%llu B), %llu down (%llu B); op by op %llu up (%llu B), %llu down (%llu B)\n",
      test::device_name(), seqs, c.n_layers,
      static_cast<unsigned long long>(whole.to_device_copies),
      static_cast<unsigned long long>(whole.to_device_bytes),
      static_cast<unsigned long long>(whole.to_host_copies),
      static_cast<unsigned long long>(whole.to_host_bytes),
      static_cast<unsigned long long>(ops.to_device_copies),
      static_cast<unsigned long long>(ops.to_device_bytes),
      static_cast<unsigned long long>(ops.to_host_copies),
      static_cast<unsigned long long>(ops.to_host_bytes));
}

// Greedy decoding through Transformer::greedy_step: the CUDA backend takes each wanted token's
// argmax on the device (kernels/ops/argmax.cuh) and reads back one int per token; the tokens are
// the host's argmax of the same backend's logits, and the CPU's greedy_step (host argmax) agrees.
TEST(DeviceBackend, GreedyStepTakesTheArgmaxOnTheDevice) {
  const auto& m = test::real_model();
  const ModelConfig& c = m.model->config();
  const int seqs = 3, steps = 10;
  auto sim = test::device_backend(GemmType::kF32);
  auto sim_logits = test::device_backend(GemmType::kF32);
  auto cpu = make_cpu_backend(1);
  std::vector<int> tokens[3];
  for (int which = 0; which < 3; ++which) {
    Backend& b = which == 0 ? *sim : which == 1 ? *sim_logits : *cpu;
    Transformer t(m.model, b);
    KvCacheManager cache({c.n_layers, c.n_kv_heads, c.head_dim(), 4, 32, {}, {}},
                         AllocatorKind::kPaged, c.seq_len, true);
    std::vector<int> next = {1, 7, 42};
    for (int s = 0; s < seqs; ++s) cache.require_add_sequence(SeqId(s));
    for (int pos = 0; pos < steps; ++pos) {
      std::vector<StepToken> step;
      for (int s = 0; s < seqs; ++s) {
        cache.require_append_slots(SeqId(s), 1);
        step.push_back(
            {next[static_cast<std::size_t>(s)], pos, cache.view(SeqId(s)), true, nullptr});
      }
      if (which == 1) {
        const std::span<const float> logits = t.forward_step(step);
        for (int s = 0; s < seqs; ++s)
          next[static_cast<std::size_t>(s)] = argmax(logits.subspan(
              static_cast<std::size_t>(s) * c.vocab_size, static_cast<std::size_t>(c.vocab_size)));
      } else {
        const device::Traffic before = cuda_traffic(b).value_or(device::Traffic{});
        const std::span<const int> greedy = t.greedy_step(step);
        ASSERT_EQ(greedy.size(), static_cast<std::size_t>(seqs));
        next.assign(greedy.begin(), greedy.end());
        if (which == 0) {
          const device::Traffic after = cuda_traffic(b).value();
          EXPECT_EQ(after.to_host_bytes - before.to_host_bytes, seqs * sizeof(int));
        }
      }
      tokens[which].insert(tokens[which].end(), next.begin(), next.end());
    }
  }
  EXPECT_EQ(tokens[0], tokens[1]);
  EXPECT_EQ(tokens[2], tokens[1]);
  // kvscope generate, greedy: every position reads one int back, and the text is the golden's.
  Transformer t(m.model, *sim);
  GenerateOptions o;
  o.steps = 24;
  const device::Traffic before = cuda_traffic(*sim).value();
  std::string text;
  const GenerateResult r =
      generate(t, *m.tokenizer, o, [&](const std::string& piece) { text += piece; });
  EXPECT_EQ(cuda_traffic(*sim).value().to_host_bytes - before.to_host_bytes,
            static_cast<std::uint64_t>(r.positions_run) * sizeof(int));
  const std::string golden =
      test::read_text(test::shared_models_dir() + "/golden/stories260K_greedy256.txt");
  EXPECT_EQ(golden.substr(0, text.size()), text);
}

TEST(CudaSimBackend, OwnsItsDeviceMemoryAndGivesItAllBack) {
  const auto& m = test::real_model();
  const cuda_sim::DeviceMemory before = cuda_sim::device_memory();
  {
    auto sim = make_cuda_sim_backend(GemmType::kF16);
    Transformer t(m.model, *sim);
    GenerateOptions o;
    generate_tokens(t, {}, 4, o, nullptr);
    const ModelConfig& c = m.model->config();
    // fp16 weights of every matmul (the embedding table stays on the host), plus the pool.
    const std::size_t weights = static_cast<std::size_t>(matmul_macs_per_token(c)) * 2;
    EXPECT_GE(cuda_sim::device_memory().bytes_in_use - before.bytes_in_use, weights);
  }
  const cuda_sim::DeviceMemory after = cuda_sim::device_memory();
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.allocations, before.allocations);
  // A pool's device copy lives as long as its host storage: one generation after another on the
  // same backend (each with its own cache) does not accumulate pools.
  auto sim = make_cuda_sim_backend(GemmType::kF32);
  Transformer t(m.model, *sim);
  std::size_t first = 0;
  for (int run = 0; run < 4; ++run) {
    generate_tokens(t, {}, 4, GenerateOptions{}, nullptr);
    if (run == 1) first = cuda_sim::device_memory().bytes_in_use;
  }
  EXPECT_EQ(cuda_sim::device_memory().bytes_in_use, first);
}

TEST(CudaSimBackend, RunningOutOfDeviceMemoryIsAOneLineError) {
  const auto& m = test::real_model();
  const std::size_t old =
      cuda_sim::set_device_capacity(cuda_sim::device_memory().bytes_in_use + 4096);
  auto sim = make_cuda_sim_backend(GemmType::kF32);
  Transformer t(m.model, *sim);
  try {
    generate_tokens(t, {}, 2, GenerateOptions{}, nullptr);
    ADD_FAILURE() << "ran in 4 KiB of device memory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--backend cuda-sim: cudaMalloc of"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("bytes: out of memory"), std::string::npos) << e.what();
  }
  cuda_sim::set_device_capacity(old);
}

// Once the backend holds a pool, the storage's byte moves reach the device copy: a block copy,
// a slot move and a block read back from the device equal what the host applies to the same
// bytes; the host tiles are left alone. A write to the host tiles behind the device copy's back
// (what key re-rotation on the host would be) is a bug: refused as an internal error.
TEST(DeviceBackend, ByteMovesReachTheDeviceCopyOfThePool) {
  const auto& m = test::real_model();
  const ModelConfig& c = m.model->config();
  auto sim = test::device_backend(GemmType::kF32);
  auto cpu = make_cpu_backend(1);
  const KvFormat f = parse_kv_format("int8", "test");
  const KvLayout layout{c.n_layers, c.n_kv_heads, c.head_dim(), 4, 8, f, f};
  KvCacheManager on_device(layout, AllocatorKind::kPaged, c.seq_len, true);
  KvCacheManager on_host(layout, AllocatorKind::kPaged, c.seq_len, true);
  {
    Transformer ts(m.model, *sim), tc(m.model, *cpu);
    for (KvCacheManager* cache : {&on_device, &on_host}) {
      cache->require_add_sequence(SeqId(0));
      for (int pos = 0; pos < 8; ++pos) {  // two full blocks
        cache->require_append_slots(SeqId(0), 1);
        (cache == &on_device ? ts : tc).forward(pos + 1, pos, cache->view(SeqId(0)));
      }
    }
  }
  ASSERT_TRUE(on_device.storage()->on_device());
  ASSERT_FALSE(on_host.storage()->on_device());
  const std::size_t n = layout.block_bytes();
  const auto block = [n](const KvStorage& s, int b) {
    std::vector<std::byte> out(n);
    s.read_block(BlockId(b), out.data());
    return out;
  };
  const std::vector<BlockId>& used = on_host.table(SeqId(0)).blocks;
  ASSERT_EQ(used, on_device.table(SeqId(0)).blocks);
  std::vector<int> spare;  // zeroed on both sides: device memory starts uninitialized
  for (int b = 0; b < 8; ++b) {
    if (std::find(used.begin(), used.end(), BlockId(b)) != used.end()) continue;
    spare.push_back(b);
    const std::vector<std::byte> zeros(n);
    for (KvCacheManager* cache : {&on_device, &on_host})
      cache->storage()->write_block(BlockId(b), zeros.data());
  }
  ASSERT_EQ(spare.size(), 6u);
  for (KvCacheManager* cache : {&on_device, &on_host}) {
    KvStorage& s = *cache->storage();
    s.copy_block(used[0], BlockId(spare[0]));
    s.copy_slot(used[1], 1, BlockId(spare[1]), 3);
    s.write_block(BlockId(spare[2]), block(s, used[1].value).data());
  }
  const KvStorage &d = *on_device.storage(), &h = *on_host.storage();
  for (int b = 0; b < 8; ++b) EXPECT_EQ(block(d, b), block(h, b)) << "block " << b;
  EXPECT_EQ(block(h, spare[0]), block(h, used[0].value));
  EXPECT_NE(block(h, spare[1]), std::vector<std::byte>(n)) << "the moved slot holds K/V";
  // The moves' destinations hold K/V on the device, and the storage's own tiles of them were
  // never written: every byte lives on the device.
  for (int b : {spare[0], spare[1], spare[2]}) {
    for (int layer = 0; layer < layout.n_layers; ++layer) {
      for (KvKind kind : {KvKind::kKey, KvKind::kValue}) {
        const std::byte* t = d.tile(layer, kind, BlockId(b));
        EXPECT_TRUE(std::all_of(t, t + layout.tile_bytes(kind),
                                [](std::byte x) { return x == std::byte{0}; }))
            << "block " << b << " layer " << layer;
      }
    }
  }
}

TEST(DeviceBackend, RefusesWhatItsKernelsDoNotCoverYet) {
  auto sim = test::device_backend();
  const auto& smol = test::smollm2_native();
  Transformer native(smol.model, *sim);
  try {
    generate_tokens(native, {}, 2, GenerateOptions{}, nullptr);
    ADD_FAILURE() << "quantized weights ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected fp32 weights (--weight-format f32)"),
              std::string::npos)
        << e.what();
  }
}

// End to end on stories260K: the CUDA backend on the device writes each token's latent
// (the CPU's, to float rounding, in the pool's format) and attends over the latents, mode A
// (every K and V rebuilt, RoPE re-applied, paged attention over the rebuilt rows) and mode B
// (absorbed); the greedy tokens are the CPU's, with fp32 GEMM weights. 60 tokens (30 under
// AddressSanitizer, where each emulated launch costs far more).
TEST(DeviceBackend, MlaBothModesGiveTheCpusTokens) {
#if defined(__SANITIZE_ADDRESS__)
  const int steps = 30;
#else
  const int steps = 60;
#endif
  const auto& m = test::real_model();
  auto cpu_backend = make_cpu_backend(1);
  auto sim = test::device_backend(GemmType::kF32);
  Transformer on_cpu(m.model, *cpu_backend), on_sim(m.model, *sim);
  struct Case {
    MlaMode mode;
    int rank, rope_dims;
    RopeSelect select;
    const char* format;
  };
  for (const Case c : {Case{MlaMode::kReconstruct, 16, 0, RopeSelect::kHighFrequency, "fp32"},
                       Case{MlaMode::kReconstruct, 40, 0, RopeSelect::kHighFrequency, "int8"},
                       Case{MlaMode::kAbsorbed, 16, 2, RopeSelect::kHighFrequency, "fp32"},
                       Case{MlaMode::kAbsorbed, 24, 2, RopeSelect::kWeightNorm, "int4"},
                       Case{MlaMode::kAbsorbed, 30, 4, RopeSelect::kHighFrequency, "fp16"}}) {
    const MlaCodec codec = make_mla_codec(*m.model, {c.mode, c.rank, c.rope_dims, c.select});
    GenerateOptions o;
    o.mla = &codec;
    o.k_format = o.v_format = parse_kv_format(c.format, "test");
    o.allocator = AllocatorKind::kPaged;
    const std::vector<int> want = generate_tokens(on_cpu, {}, steps, o, nullptr);
    EXPECT_EQ(generate_tokens(on_sim, {}, steps, o, nullptr), want)
        << codec.name() << " latents " << c.format;
  }
}

TEST(CudaSimBackend, GemmTypeFlag) {
  EXPECT_EQ(parse_gemm_type("bf16", "--device-weights"), GemmType::kBF16);
  try {
    parse_gemm_type("fp16", "--device-weights");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--device-weights: expected f32, f16 or bf16, got \"fp16\"");
  }
}

}  // namespace
}  // namespace kvscope

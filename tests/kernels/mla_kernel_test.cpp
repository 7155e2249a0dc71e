// The MLA latent cache on the device (kernels/ops/mla.cuh, kernels/backend/cuda_mla.cpp), executed
// on the SIMT emulator against the CPU (engine/backend/cpu/mla_ops.cpp): mode B's latent attention
// kernel over latents and RoPE keys in several formats (outputs and softmax rows), the gather of a
// sequence's rows, and, end to end on the real model, both modes' latents, attention and greedy
// tokens equal to the CPU's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/mla_ops.h"
#include "engine/infer/generate.h"
#include "engine/infer/transformer.h"
#include "engine/mla/mla_codec.h"
#include "engine/quant/kv_codec.h"
#include "kernels/backend/cuda_backend.h"
#include "kernels/ops/mla.cuh"
#include "tests/kernels/kernel_test_support.h"
#include "tests/test_support.h"

namespace kvscope::kernels {
namespace {

using test::randn;

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double atol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::fabs(double(got[i]) - want[i]), atol + 1e-4 * std::fabs(double(want[i])))
        << what << " element " << i << ": " << got[i] << " vs " << want[i];
  }
}

// A one-layer latent pool of `tokens` random latents (rank R) and RoPE keys (rope_heads x D),
// written by the CPU's codec into blocks handed out in reverse order.
struct LatentCache {
  LatentCache(const char* format, int block_size, int tokens, int rank, int rope_heads,
              int rope_dim) {
    KvLayout L;
    L.n_layers = 1;
    L.kv_heads = 2;
    L.head_dim = 8;
    L.block_size = block_size;
    L.num_blocks = (tokens + block_size - 1) / block_size + 2;
    L.k_format = L.v_format = parse_kv_format(format, "test");
    L.latent_dim = rank;
    L.rope_heads = rope_heads;
    L.rope_dim = rope_dim;
    storage = std::make_unique<KvStorage>(L);
    for (int b = L.num_blocks - 1; b >= 0; --b) blocks.emplace_back(b);
    const auto c = randn(static_cast<std::size_t>(tokens) * rank, 41u);
    const auto k =
        randn(static_cast<std::size_t>(tokens) * std::max(1, rope_heads * rope_dim), 42u);
    for (int t = 0; t < tokens; ++t) {
      KvSeqView v = view(t + 1);
      quant::write_token(v, 0, KvKind::kKey, c.data() + static_cast<std::size_t>(t) * rank);
      if (rope_heads > 0) {
        quant::write_token(v, 0, KvKind::kValue,
                           k.data() + static_cast<std::size_t>(t) * rope_heads * rope_dim);
      }
    }
  }
  KvSeqView view(int slots) {
    KvSeqView v;
    v.storage = storage.get();
    v.blocks = blocks;
    v.num_slots = slots;
    return v;
  }
  KvTiles tiles(KvKind kind) const {
    const KvLayout& L = storage->layout();
    const KvFormat& f = L.format(kind);
    return {reinterpret_cast<unsigned char*>(storage->tile(0, kind, BlockId(0))),
            static_cast<long>(L.tile_bytes(kind)), static_cast<int>(cuda_kv_code(f, kind)),
            f.effective_group(L.row_heads(kind) * L.row_head_dim(kind)), 0};
  }
  std::vector<int> table() const {
    std::vector<int> t;
    for (BlockId b : blocks) t.push_back(static_cast<int>(b.value));
    return t;
  }
  std::unique_ptr<KvStorage> storage;
  std::vector<BlockId> blocks;
};

// Mode B's kernel: scores over latents and RoPE keys, softmax, context; the CPU's figures for
// every format the latents may take, with and without RoPE keys, short and long contexts, and
// evicted slots.
TEST(MlaKernels, LatentAttentionMatchesTheCpus) {
  struct Case {
    const char* format;
    int block_size, tokens, rank, rope_heads, rope_dim;
    bool evict;
    int chunk;  // 0: one pass; else split-K in chunks of this many slots
  };
  for (const Case c :
       {Case{"fp32", 16, 7, 24, 2, 4, false, 0}, Case{"fp16", 16, 300, 40, 4, 2, true, 0},
        Case{"int8", 1, 50, 16, 0, 0, false, 0}, Case{"int4-g8", 64, 200, 32, 2, 4, false, 0},
        // Split-K: uneven chunks, evicted slots, and past the one-pass limit.
        Case{"fp16", 16, 300, 40, 4, 2, true, 64},
        Case{"int8", 4, 4500, 16, 2, 4, false, kLatentSplitChunk}}) {
    const std::string what = std::string(c.format) + " " + std::to_string(c.tokens) +
                             " slots, chunk " + std::to_string(c.chunk);
    LatentCache cache(c.format, c.block_size, c.tokens, c.rank, c.rope_heads, c.rope_dim);
    const int heads = 8;
    const auto q_lat = randn(static_cast<std::size_t>(heads) * c.rank, 43u, 0.5f);
    const auto q_rope = randn(static_cast<std::size_t>(heads) * std::max(1, c.rope_dim), 44u);
    std::vector<std::uint8_t> live(static_cast<std::size_t>(c.tokens), 1);
    if (c.evict)
      for (int t = 1; t < c.tokens; t += 3) live[static_cast<std::size_t>(t)] = 0;
    KvSeqView view = cache.view(c.tokens);
    if (c.evict) view.slot_live = live.data();
    cpu::LatentAttentionShape shape;
    shape.n_heads = heads;
    shape.rank = c.rank;
    shape.rope_heads = c.rope_heads;
    shape.rope_dim = c.rope_dim;
    shape.score_divisor = std::sqrt(16.0f);
    std::vector<float> want(static_cast<std::size_t>(heads) * c.rank), scratch;
    cpu::mla_latent_attention(view, 0, shape, q_lat.data(), q_rope.data(), want.data(), scratch);
    const std::vector<float> want_rows(scratch.begin(),
                                       scratch.begin() + static_cast<long>(heads) * c.tokens);
    const std::vector<int> table = cache.table();
    LatentKv kv;
    kv.latents = cache.tiles(KvKind::kKey);
    kv.rope = cache.tiles(KvKind::kValue);
    kv.block_table = table.data();
    kv.num_slots = c.tokens;
    kv.block_size = c.block_size;
    kv.rank = c.rank;
    kv.rope_heads = c.rope_heads;
    kv.rope_dim = c.rope_dim;
    kv.live = c.evict ? live.data() : nullptr;
    std::vector<float> got(want.size()), rows(want_rows.size());
    if (c.chunk == 0) {
      launch_mla_latent_attention(got.data(), rows.data(), q_lat.data(), q_rope.data(), kv, heads,
                                  shape.score_divisor);
    } else {
      std::vector<float> work(
          static_cast<std::size_t>(split_workspace_floats(heads, c.rank, c.tokens, c.chunk)));
      launch_mla_latent_attention_split(got.data(), rows.data(), q_lat.data(), q_rope.data(), kv,
                                        heads, shape.score_divisor, c.chunk, work.data());
    }
    // Split-K sums each chunk apart and rescales: a few more roundings than one pass.
    expect_close(got, want, c.chunk == 0 ? 2e-6 : 1e-5, what + " context");
    expect_close(rows, want_rows, c.chunk == 0 ? 1e-7 : 1e-6, what + " softmax rows");
  }
}

// DeviceOps::mla_latent_attention (what the backend calls) takes one pass up to
// latent_max_slots() and splits past it: 4,500 slots give the CPU's context and rows.
TEST(MlaKernels, TheDeviceSplitsLatentAttentionPastTheOnePassLimit) {
  const int tokens = 4500, rank = 16, heads = 4;
  ASSERT_GT(tokens, device::DeviceOps::latent_max_slots());
  LatentCache cache("fp16", 16, tokens, rank, 2, 4);
  const auto q_lat = randn(static_cast<std::size_t>(heads) * rank, 45u, 0.5f);
  const auto q_rope = randn(static_cast<std::size_t>(heads) * 4, 46u);
  cpu::LatentAttentionShape shape;
  shape.n_heads = heads;
  shape.rank = rank;
  shape.rope_heads = 2;
  shape.rope_dim = 4;
  shape.score_divisor = 4.0f;
  std::vector<float> want(static_cast<std::size_t>(heads) * rank), scratch;
  cpu::mla_latent_attention(cache.view(tokens), 0, shape, q_lat.data(), q_rope.data(), want.data(),
                            scratch);
  const std::vector<int> table = cache.table();
  auto ops = device::make_emulated_device_ops();
  const auto device_tiles = [&](KvKind kind) {
    const KvTiles t = cache.tiles(kind);
    return device::DeviceTiles{t.base, t.tile_bytes, static_cast<device::KvCode>(t.code), t.group,
                               0};
  };
  device::LatentPool p;
  p.latents = device_tiles(KvKind::kKey);
  p.rope = device_tiles(KvKind::kValue);
  p.block_table = table.data();
  p.num_slots = tokens;
  p.block_size = 16;
  p.rank = rank;
  p.rope_heads = 2;
  p.rope_dim = 4;
  std::vector<float> got(want.size()), rows(static_cast<std::size_t>(heads) * tokens);
  ops->mla_latent_attention(got.data(), rows.data(), q_lat.data(), q_rope.data(), p, heads, 4.0f);
  expect_close(got, want, 1e-5, "context");
  expect_close(
      rows,
      std::vector<float>(scratch.begin(), scratch.begin() + static_cast<long>(heads) * tokens),
      1e-6, "softmax rows");
}

// The gather decodes a sequence's rows through its block table as the CPU's reader does.
TEST(MlaKernels, GatherDecodesEverySlotsRow) {
  LatentCache cache("int8", 4, 30, 24, 0, 0);
  const std::vector<int> table = cache.table();
  std::vector<float> got(30 * 24);
  launch_kv_gather(got.data(), cache.tiles(KvKind::kKey), table.data(), 30, 1, 24, 4);
  const quant::TileReader reader(cache.view(30), 0, KvKind::kKey);
  std::vector<float> tmp(24);
  for (int t = 0; t < 30; ++t) {
    const float* want = reader.head(t, 0, tmp.data());
    for (int r = 0; r < 24; ++r) ASSERT_EQ(got[static_cast<std::size_t>(t) * 24 + r], want[r]);
  }
}

}  // namespace
}  // namespace kvscope::kernels

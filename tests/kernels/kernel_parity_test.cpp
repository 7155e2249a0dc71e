// Every CUDA kernel in kernels/ops, executed on the SIMT emulator, against its CPU twin in
// engine/backend/cpu: block sizes, shapes and GQA ratios as the engine uses them. Tolerances are
// float rounding in sums of a different order (|got - want| <= atol + rtol * |want|); argmax is
// exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/quant/kv_codec.h"
#include "kernels/ops/argmax.cuh"
#include "kernels/ops/kv_rotate.cuh"
#include "kernels/ops/kv_write.cuh"
#include "kernels/ops/paged_attention.cuh"
#include "kernels/ops/rmsnorm.cuh"
#include "kernels/ops/rope.cuh"
#include "kernels/ops/swiglu.cuh"
#include "tests/kernels/kernel_test_support.h"
#include "tests/quant/kv_test_support.h"

namespace kvscope::kernels {
namespace {

using test::randn;

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double atol,
                  double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::fabs(double(got[i]) - want[i]), atol + rtol * std::fabs(double(want[i])))
        << what << " element " << i << ": " << got[i] << " vs " << want[i];
  }
}

// Every captured attention row, in call order.
struct CapturedRows : AttentionObserver {
  std::vector<float> all;
  void on_attention(int, int, int, std::span<const float> w) override {
    all.insert(all.end(), w.begin(), w.end());
  }
};

// `tokens` tokens of random K and V rows (seeds k_seed, k_seed + 1) written into `cache`.
void fill_random(test::QuantCache& cache, int tokens, int kv_dim, unsigned k_seed) {
  const auto k = randn(static_cast<std::size_t>(tokens) * kv_dim, k_seed);
  const auto v = randn(static_cast<std::size_t>(tokens) * kv_dim, k_seed + 1);
  for (int t = 0; t < tokens; ++t) {
    cache.append(k.data() + static_cast<std::size_t>(t) * kv_dim,
                 v.data() + static_cast<std::size_t>(t) * kv_dim);
  }
}

TEST(KernelParity, RmsNorm) {
  for (int n : {64, 576, 1000}) {
    for (unsigned threads : {32u, 128u, 1024u}) {
      const int rows = 3;
      const auto x = randn(static_cast<std::size_t>(rows) * n, 1u + n, 3.0f);
      const auto w = randn(static_cast<std::size_t>(n), 2u + n);
      std::vector<float> got(x.size()), want(x.size());
      launch_rmsnorm(got.data(), x.data(), w.data(), rows, n, 1e-5f, threads);
      for (int r = 0; r < rows; ++r) {
        const std::size_t off = static_cast<std::size_t>(r) * n;
        cpu::rmsnorm(want.data() + off, x.data() + off, w.data(), n, 1e-5f);
      }
      expect_close(got, want, 1e-6, 1e-5,
                   "rmsnorm n=" + std::to_string(n) + " threads=" + std::to_string(threads));
    }
  }
}

TEST(KernelParity, RopeAtPositionsUpToSmolLM2sContext) {
  // SmolLM2's shape: 9 query heads and 3 KV heads of 64; theta 100000.
  const int q_dim = 576, kv_dim = 192, head_dim = 64;
  const std::vector<int> pos = {0, 1, 17, 511, 4095, 8191};
  const int tokens = static_cast<int>(pos.size());
  const auto q0 = randn(static_cast<std::size_t>(tokens) * q_dim, 3u);
  const auto k0 = randn(static_cast<std::size_t>(tokens) * kv_dim, 4u);
  for (float theta : {10000.0f, 100000.0f}) {
    std::vector<float> q = q0, k = k0, qw = q0, kw = k0;
    launch_rope(q.data(), k.data(), pos.data(), tokens, q_dim, kv_dim, head_dim, theta);
    for (int t = 0; t < tokens; ++t) {
      cpu::rope(qw.data() + static_cast<std::size_t>(t) * q_dim,
                kw.data() + static_cast<std::size_t>(t) * kv_dim, pos[static_cast<std::size_t>(t)],
                q_dim, kv_dim, head_dim, theta);
    }
    expect_close(q, qw, 5e-6, 1e-5, "rope q, theta " + std::to_string(theta));
    expect_close(k, kw, 5e-6, 1e-5, "rope k, theta " + std::to_string(theta));
  }
}

TEST(KernelParity, SwiGlu) {
  for (long n : {1L, 1536L, 100000L}) {
    auto hb = randn(static_cast<std::size_t>(n), 5u, 4.0f);
    const auto hb2 = randn(static_cast<std::size_t>(n), 6u);
    std::vector<float> want = hb;
    cpu::swiglu(want.data(), hb2.data(), static_cast<int>(n));
    launch_swiglu(hb.data(), hb2.data(), n, 8, 128);
    expect_close(hb, want, 1e-6, 1e-5, "swiglu n=" + std::to_string(n));
  }
}

TEST(KernelParity, ArgmaxIsTheFirstLargestLogit) {
  const int rows = 4, n = 49152;  // SmolLM2's vocabulary
  auto logits = randn(static_cast<std::size_t>(rows) * n, 7u, 5.0f);
  // Row 1: a tie between two far-apart maxima; row 2: the maximum in the last element; row 3:
  // all equal.
  logits[1 * n + 40000] = logits[1 * n + 123] = 100.0f;
  logits[2 * n + n - 1] = 100.0f;
  std::fill(logits.begin() + 3 * n, logits.end(), -1.5f);
  for (unsigned threads : {32u, 256u, 1024u}) {
    std::vector<int> got(rows, -1);
    launch_argmax(got.data(), logits.data(), rows, n, threads);
    for (int r = 0; r < rows; ++r) {
      const auto row = logits.begin() + static_cast<std::ptrdiff_t>(r) * n;
      EXPECT_EQ(got[static_cast<std::size_t>(r)], std::max_element(row, row + n) - row)
          << "row " << r << " threads " << threads;
    }
  }
}

// Decode attention over an fp32 paged pool whose blocks are handed out in shuffled order.
TEST(KernelParity, PagedDecodeAttention) {
  struct Shape {
    int heads, kv_heads, head_dim;
  };
  const KvFormat fp32 = parse_kv_format("fp32", "test");
  for (const Shape s : {Shape{9, 3, 64}, Shape{4, 4, 16}, Shape{8, 1, 32}}) {
    for (int block_size : {1, 16, 256}) {
      for (int tokens : {1, 7, 300, 2000}) {
        const std::string what = "heads " + std::to_string(s.heads) + "/" +
                                 std::to_string(s.kv_heads) + " dim " + std::to_string(s.head_dim) +
                                 " block " + std::to_string(block_size) + " tokens " +
                                 std::to_string(tokens);
        const int kv_dim = s.kv_heads * s.head_dim;
        test::QuantCache cache(fp32, fp32, block_size, tokens, s.kv_heads, s.head_dim);
        fill_random(cache, tokens, kv_dim, 8u);
        const auto q = randn(static_cast<std::size_t>(s.heads) * s.head_dim, 10u, 2.0f);
        const KvSeqView view = cache.view();
        std::vector<float> want(q.size()), got(q.size()), scratch;
        cpu::paged_attention(view, 0, {s.heads, s.kv_heads, s.head_dim}, q.data(), want.data(),
                             tokens - 1, nullptr, scratch);
        const KvStorage& st = *view.storage;
        std::vector<int> table;
        for (BlockId b : view.blocks) table.push_back(static_cast<int>(b.value));
        PagedKv kv;
        auto* base = const_cast<unsigned char*>(
            reinterpret_cast<const unsigned char*>(st.tile(0, KvKind::kKey, BlockId(0))));
        kv.k = {base, static_cast<long>(st.layout().tile_bytes(KvKind::kKey)), kKvF32};
        base = const_cast<unsigned char*>(
            reinterpret_cast<const unsigned char*>(st.tile(0, KvKind::kValue, BlockId(0))));
        kv.v = {base, static_cast<long>(st.layout().tile_bytes(KvKind::kValue)), kKvF32};
        kv.block_table = table.data();
        kv.num_slots = view.num_slots;
        kv.block_size = block_size;
        kv.kv_heads = s.kv_heads;
        kv.head_dim = s.head_dim;
        launch_paged_attention(got.data(), q.data(), kv, s.heads, 64);
        expect_close(got, want, 2e-6, 1e-4, what);
      }
    }
  }
}

// The formats the kernels read and write, with their codes.
struct Fmt {
  const char* name;
  int code;
};
constexpr Fmt kFormats[] = {{"fp32", kKvF32},  {"fp16", kKvF16},      {"bf16", kKvBF16},
                            {"int8", kKvInt8}, {"fp8-e4m3", kKvE4M3}, {"fp8-e5m2", kKvE5M2}};

KvTiles tiles_of(KvStorage& st, KvKind kind, int code) {
  return {reinterpret_cast<unsigned char*>(st.tile(0, kind, BlockId(0))),
          static_cast<long>(st.layout().tile_bytes(kind)), code};
}

// Quantize-on-write: the kernel writes the very bytes the CPU writes (codes and scales), every
// per-token format, values from tiny to past each format's range, blocks in shuffled order.
TEST(KernelParity, KvWriteQuantizesToTheCpusBytes) {
  const int kv_heads = 3, head_dim = 64, kv_dim = kv_heads * head_dim, tokens = 40;
  for (int block_size : {1, 16}) {
    for (const Fmt& f : kFormats) {
      const KvFormat fmt = parse_kv_format(f.name, "test");
      test::QuantCache cpu_cache(fmt, fmt, block_size, tokens, kv_heads, head_dim);
      test::QuantCache gpu_cache(fmt, fmt, block_size, tokens, kv_heads, head_dim);
      std::mt19937 rng(21);
      std::vector<float> ks(static_cast<std::size_t>(tokens) * kv_dim), vs(ks.size());
      for (int t = 0; t < tokens; ++t) {
        // Each token its own magnitude: 1e-6 .. 1e6, so scales, subnormals and saturation
        // (fp16 beyond 65504, fp8 scale rounding) all occur.
        const float mag = std::pow(10.0f, -6.0f + 12.0f * static_cast<float>(t) / tokens);
        std::normal_distribution<float> d(0.0f, mag);
        for (int i = 0; i < kv_dim; ++i) {
          ks[static_cast<std::size_t>(t) * kv_dim + i] = d(rng);
          vs[static_cast<std::size_t>(t) * kv_dim + i] = d(rng);
        }
      }
      ks[7 * kv_dim + 5] = INFINITY;  // not a finite value: no part of the scale
      for (int t = 0; t < tokens; ++t) {
        cpu_cache.append(&ks[static_cast<std::size_t>(t) * kv_dim],
                         &vs[static_cast<std::size_t>(t) * kv_dim]);
        gpu_cache.append(&ks[static_cast<std::size_t>(t) * kv_dim],
                         &vs[static_cast<std::size_t>(t) * kv_dim]);
      }
      // The kernel's pool starts as garbage, then gets every token through the kernel.
      KvStorage& st = gpu_cache.storage();
      for (KvKind kind : {KvKind::kKey, KvKind::kValue}) {
        std::memset(
            st.tile(0, kind, BlockId(0)), 0xAB,
            st.layout().tile_bytes(kind) * static_cast<std::size_t>(st.layout().num_blocks));
      }
      const KvSeqView view = gpu_cache.view();
      std::vector<int> table;
      for (BlockId b : view.blocks) table.push_back(static_cast<int>(b.value));
      for (int t = 0; t < tokens; ++t) {
        launch_kv_write(tiles_of(st, KvKind::kKey, f.code), tiles_of(st, KvKind::kValue, f.code),
                        table.data(), t, block_size, &ks[static_cast<std::size_t>(t) * kv_dim],
                        &vs[static_cast<std::size_t>(t) * kv_dim], kv_heads, head_dim);
      }
      // Every slot the sequence wrote: its codes and its scales (the rest of the pool is
      // nobody's).
      const KvStorage& a = cpu_cache.storage();
      for (KvKind kind : {KvKind::kKey, KvKind::kValue}) {
        const quant::TileGeometry g = quant::tile_geometry(a.layout(), kind);
        for (int t = 0; t < tokens; ++t) {
          const BlockId b = view.blocks[static_cast<std::size_t>(t / block_size)];
          const auto* pa = reinterpret_cast<const unsigned char*>(a.tile(0, kind, b));
          const auto* pb = reinterpret_cast<const unsigned char*>(st.tile(0, kind, b));
          const std::size_t off = static_cast<std::size_t>(t % block_size);
          const std::string what =
              std::string(f.name) + " block size " + std::to_string(block_size) +
              (kind == KvKind::kKey ? " K" : " V") + " token " + std::to_string(t);
          ASSERT_EQ(std::memcmp(pa + off * g.row_bytes, pb + off * g.row_bytes, g.row_bytes), 0)
              << what << ": codes";
          ASSERT_EQ(std::memcmp(pa + g.meta_offset + off * g.token_meta_bytes,
                                pb + g.meta_offset + off * g.token_meta_bytes, g.token_meta_bytes),
                    0)
              << what << ": scales";
        }
      }
    }
  }
}

// Decode attention over every per-token format: the kernel dequantizes what the CPU would, so
// the outputs agree to float rounding; and the captured softmax rows are the CPU's.
TEST(KernelParity, PagedDecodeAttentionOverQuantizedFormatsAndCapture) {
  const int heads = 9, kv_heads = 3, head_dim = 64, kv_dim = kv_heads * head_dim;
  for (const Fmt& f : kFormats) {
    for (int tokens : {1, 300}) {
      const KvFormat fmt = parse_kv_format(f.name, "test");
      test::QuantCache cache(fmt, fmt, 16, tokens, kv_heads, head_dim);
      fill_random(cache, tokens, kv_dim, 31u);
      const auto q = randn(static_cast<std::size_t>(heads) * head_dim, 33u, 2.0f);
      const KvSeqView view = cache.view();
      std::vector<float> want(q.size()), got(q.size()), scratch;
      CapturedRows rows;
      cpu::paged_attention(view, 0, {heads, kv_heads, head_dim}, q.data(), want.data(), tokens - 1,
                           &rows, scratch);
      std::vector<int> table;
      for (BlockId b : view.blocks) table.push_back(static_cast<int>(b.value));
      PagedKv kv;
      kv.k = tiles_of(cache.storage(), KvKind::kKey, f.code);
      kv.v = tiles_of(cache.storage(), KvKind::kValue, f.code);
      kv.block_table = table.data();
      kv.num_slots = tokens;
      kv.block_size = 16;
      kv.kv_heads = kv_heads;
      kv.head_dim = head_dim;
      std::vector<float> weights(static_cast<std::size_t>(heads) * tokens);
      launch_paged_attention(got.data(), q.data(), kv, heads, 64, weights.data());
      const std::string what = std::string(f.name) + " tokens " + std::to_string(tokens);
      expect_close(got, want, 2e-6, 1e-4, what);
      expect_close(weights, rows.all, 1e-7, 1e-4, what + " captured weights");
    }
  }
}

// Split-K (long contexts): each split attends over its chunk with its own maximum, and the
// reduction rescales and combines them; outputs and captured rows equal the CPU's, past the
// one-pass kernel's shared-memory limit (13,000 and 20,000 slots), with uneven last chunks.
TEST(KernelParity, SplitKAttentionOverLongContexts) {
  const int heads = 8, kv_heads = 2, head_dim = 64, kv_dim = kv_heads * head_dim;
  struct Case {
    const char* format;
    int block_size, tokens, chunk;
  };
  for (const Case c : {Case{"fp32", 16, 3000, 512}, Case{"fp32", 256, 13000, kSplitChunk},
                       Case{"int8", 16, 20000, kSplitChunk}, Case{"fp16", 1, 4097, kSplitChunk}}) {
    const KvFormat fmt = parse_kv_format(c.format, "test");
    test::QuantCache cache(fmt, fmt, c.block_size, c.tokens, kv_heads, head_dim);
    fill_random(cache, c.tokens, kv_dim, 41u);
    const auto q = randn(static_cast<std::size_t>(heads) * head_dim, 43u, 3.0f);
    const KvSeqView view = cache.view();
    std::vector<float> want(q.size()), got(q.size()), scratch;
    CapturedRows rows;
    cpu::paged_attention(view, 0, {heads, kv_heads, head_dim}, q.data(), want.data(), c.tokens - 1,
                         &rows, scratch);
    std::vector<int> table;
    for (BlockId b : view.blocks) table.push_back(static_cast<int>(b.value));
    const int code = std::string(c.format) == "fp32"   ? kKvF32
                     : std::string(c.format) == "int8" ? kKvInt8
                                                       : kKvF16;
    PagedKv kv;
    kv.k = tiles_of(cache.storage(), KvKind::kKey, code);
    kv.v = tiles_of(cache.storage(), KvKind::kValue, code);
    kv.block_table = table.data();
    kv.num_slots = c.tokens;
    kv.block_size = c.block_size;
    kv.kv_heads = kv_heads;
    kv.head_dim = head_dim;
    std::vector<float> work(
        static_cast<std::size_t>(split_workspace_floats(heads, head_dim, c.tokens, c.chunk)));
    std::vector<float> weights(static_cast<std::size_t>(heads) * c.tokens);
    launch_paged_attention_split(got.data(), q.data(), kv, heads, c.chunk, work.data(), 128,
                                 weights.data());
    const std::string what = std::string(c.format) + " block " + std::to_string(c.block_size) +
                             " tokens " + std::to_string(c.tokens) + " chunk " +
                             std::to_string(c.chunk);
    expect_close(got, want, 2e-6, 1e-4, what);
    expect_close(weights, rows.all, 1e-8, 1e-4, what + " captured weights");
  }
}

// Token eviction: decode attention with evicted slots (KvSeqView::slot_live) gives them no
// weight, as the CPU does; one pass and split-K, including a split whose slots are all evicted.
TEST(KernelParity, AttentionSkipsEvictedSlots) {
  const int heads = 8, kv_heads = 2, head_dim = 32, kv_dim = kv_heads * head_dim;
  for (const char* format : {"fp32", "int8"}) {
    for (bool split : {false, true}) {
      const int tokens = 700, chunk = 128, block_size = 16;
      const KvFormat fmt = parse_kv_format(format, "test");
      test::QuantCache cache(fmt, fmt, block_size, tokens, kv_heads, head_dim);
      fill_random(cache, tokens, kv_dim, 51u);
      // About a third evicted at random; slots [128, 256) (split-K's second chunk) all evicted;
      // the last (the query's own) live.
      std::vector<std::uint8_t> live(static_cast<std::size_t>(tokens));
      std::mt19937 rng(53);
      for (int t = 0; t < tokens; ++t)
        live[static_cast<std::size_t>(t)] = (t >= 128 && t < 256) || rng() % 3 == 0 ? 0 : 1;
      live.back() = 1;
      const auto q = randn(static_cast<std::size_t>(heads) * head_dim, 54u, 3.0f);
      KvSeqView view = cache.view();
      view.slot_live = live.data();
      std::vector<float> want(q.size()), got(q.size()), scratch;
      CapturedRows rows;
      cpu::paged_attention(view, 0, {heads, kv_heads, head_dim}, q.data(), want.data(), tokens - 1,
                           &rows, scratch);
      std::vector<int> table;
      for (BlockId b : view.blocks) table.push_back(static_cast<int>(b.value));
      const int code = std::string(format) == "fp32" ? kKvF32 : kKvInt8;
      PagedKv kv;
      kv.k = tiles_of(cache.storage(), KvKind::kKey, code);
      kv.v = tiles_of(cache.storage(), KvKind::kValue, code);
      kv.block_table = table.data();
      kv.num_slots = tokens;
      kv.block_size = block_size;
      kv.kv_heads = kv_heads;
      kv.head_dim = head_dim;
      kv.live = live.data();
      std::vector<float> weights(static_cast<std::size_t>(heads) * tokens, -1.0f);
      std::vector<float> work(
          static_cast<std::size_t>(split_workspace_floats(heads, head_dim, tokens, chunk)));
      if (split)
        launch_paged_attention_split(got.data(), q.data(), kv, heads, chunk, work.data(), 64,
                                     weights.data());
      else
        launch_paged_attention(got.data(), q.data(), kv, heads, 64, weights.data());
      const std::string what = std::string(format) + (split ? " split-K" : " one pass");
      expect_close(got, want, 2e-6, 1e-4, what);
      expect_close(weights, rows.all, 1e-8, 1e-4, what + " captured weights");
      for (int h = 0; h < heads; ++h) {
        for (int t = 0; t < tokens; ++t) {
          if (live[static_cast<std::size_t>(t)] == 0) {
            ASSERT_EQ(weights[static_cast<std::size_t>(h) * tokens + t], 0.0f)
                << what << " head " << h << " evicted slot " << t;
          }
        }
      }
    }
  }
}

// Token eviction's position shift: the kernel re-rotates cached keys in place and stores them in
// the pool's format. Its twin is the CPU's host path (dequantize, cpu::rope by the delta,
// quant::write_token). The two ropes round their sines differently (rope.cuh), so a re-quantized
// code may land one step apart: the kernel's keys must be as close to the exact rotation (in
// double) as the CPU's, almost all code and scale bytes the CPU's (every format but fp32, whose
// last float bits differ), and slots not listed untouched.
TEST(KernelParity, KeyRotationMatchesTheCpusPositionShift) {
  const int kv_heads = 3, head_dim = 64, kv_dim = kv_heads * head_dim, tokens = 40;
  const std::pair<const char*, int> formats[] = {
      {"fp32", kKvF32},      {"fp16", kKvF16},      {"bf16", kKvBF16}, {"int8", kKvInt8},
      {"fp8-e4m3", kKvE4M3}, {"fp8-e5m2", kKvE5M2}, {"int4", kKvInt4}, {"int2-g8", kKvInt2}};
  for (int block_size : {1, 16}) {
    for (const auto& [name, code] : formats) {
      const KvFormat fmt = parse_kv_format(name, "test");
      test::QuantCache cpu_cache(fmt, fmt, block_size, tokens, kv_heads, head_dim);
      test::QuantCache gpu_cache(fmt, fmt, block_size, tokens, kv_heads, head_dim);
      const auto k = randn(static_cast<std::size_t>(tokens) * kv_dim, 61u, 2.0f);
      const auto v = randn(static_cast<std::size_t>(tokens) * kv_dim, 62u);
      for (int t = 0; t < tokens; ++t) {
        for (test::QuantCache* c : {&cpu_cache, &gpu_cache})
          c->append(&k[static_cast<std::size_t>(t) * kv_dim],
                    &v[static_cast<std::size_t>(t) * kv_dim]);
      }
      const KvSeqView view = cpu_cache.view();
      const auto row_of = [&](const KvSeqView& vw, int slot) {
        std::vector<float> row(static_cast<std::size_t>(kv_dim)),
            tmp(static_cast<std::size_t>(head_dim));
        const quant::TileReader reader(vw, 0, KvKind::kKey);
        for (int h = 0; h < kv_heads; ++h) {
          const float* x = reader.head(slot, h, tmp.data());
          std::copy(x, x + head_dim, row.begin() + static_cast<long>(h) * head_dim);
        }
        return row;
      };
      // Every third slot, by deltas as a shift makes them (negative, up to thousands of
      // positions) and one positive.
      std::vector<int> slots, deltas, rot;
      for (int t = 1; t < tokens; t += 3) {
        slots.push_back(t);
        deltas.push_back(t == 4 ? 7 : -(t * 97 + 1));
      }
      const float theta = 10000.0f;
      std::vector<std::vector<float>> before;
      for (int t = 0; t < tokens; ++t) before.push_back(row_of(view, t));
      // The CPU: TokenEvictor's host path, one slot at a time.
      for (std::size_t i = 0; i < slots.size(); ++i) {
        KvSeqView at = view;
        at.num_slots = slots[i] + 1;  // write_token writes the view's last slot
        std::vector<float> row = before[static_cast<std::size_t>(slots[i])], q = row;
        cpu::rope(q.data(), row.data(), deltas[i], kv_dim, kv_dim, head_dim, theta);
        quant::write_token(at, 0, KvKind::kKey, row.data());
      }
      // The kernel: all listed slots in one launch.
      for (std::size_t i = 0; i < slots.size(); ++i) {
        rot.push_back(
            static_cast<int>(view.blocks[static_cast<std::size_t>(slots[i] / block_size)].value));
        rot.push_back(slots[i] % block_size);
        rot.push_back(deltas[i]);
      }
      KvTiles kt = tiles_of(gpu_cache.storage(), KvKind::kKey, code);
      kt.group = fmt.effective_group(kv_dim);
      launch_kv_rotate_keys(kt, 0, 1, rot.data(), static_cast<int>(slots.size()), block_size,
                            kv_heads, head_dim, theta);
      const KvSeqView gview = gpu_cache.view();
      const quant::TileGeometry g =
          quant::tile_geometry(cpu_cache.storage().layout(), KvKind::kKey);
      long same = 0, total = 0;
      for (int t = 0; t < tokens; ++t) {
        const std::string what = std::string(name) + " block size " + std::to_string(block_size) +
                                 " slot " + std::to_string(t);
        const auto listed = std::find(slots.begin(), slots.end(), t);
        const std::vector<float> want = row_of(view, t), got = row_of(gview, t);
        if (listed == slots.end()) {
          ASSERT_EQ(got, before[static_cast<std::size_t>(t)]) << what << ": not listed, untouched";
          continue;
        }
        // The exact rotation of the stored key, in double.
        const int delta = deltas[static_cast<std::size_t>(listed - slots.begin())];
        const std::vector<float>& x = before[static_cast<std::size_t>(t)];
        double err_want = 0.0, err_got = 0.0, amax = 0.0;
        for (int e = 0; e < kv_dim; e += 2) {
          const int hd = e % head_dim;
          const double angle = delta * std::pow(double(theta), -double(hd) / head_dim);
          const double c = std::cos(angle), sn = std::sin(angle);
          const double r0 = x[e] * c - x[e + 1] * sn, r1 = x[e] * sn + x[e + 1] * c;
          amax = std::max({amax, std::fabs(r0), std::fabs(r1)});
          err_want = std::max({err_want, std::fabs(want[e] - r0), std::fabs(want[e + 1] - r1)});
          err_got = std::max({err_got, std::fabs(got[e] - r0), std::fabs(got[e + 1] - r1)});
        }
        ASSERT_LE(err_got, 1.5 * err_want + 1e-5 * amax)
            << what << ": the kernel's key is farther from the exact rotation than the CPU's";
        const BlockId b = view.blocks[static_cast<std::size_t>(t / block_size)];
        const auto* pa =
            reinterpret_cast<const unsigned char*>(cpu_cache.storage().tile(0, KvKind::kKey, b));
        const auto* pb =
            reinterpret_cast<const unsigned char*>(gpu_cache.storage().tile(0, KvKind::kKey, b));
        const std::size_t off = static_cast<std::size_t>(t % block_size);
        for (std::size_t i = 0; i < g.row_bytes; ++i, ++total)
          same += pa[off * g.row_bytes + i] == pb[off * g.row_bytes + i];
        for (std::size_t i = 0; i < g.token_meta_bytes; ++i, ++total)
          same += pa[g.meta_offset + off * g.token_meta_bytes + i] ==
                  pb[g.meta_offset + off * g.token_meta_bytes + i];
      }
      // (fp32 stores the rotated floats themselves: their last bits differ, not a code choice.)
      if (code != kKvF32) {
        EXPECT_GE(static_cast<double>(same), 0.97 * static_cast<double>(total))
            << name << " block size " << block_size << ": bytes equal to the CPU's";
      }
    }
  }
}

// One launch for a whole step: a prefill chunk's causal queries (query i sees the slots up to its
// own) and decode queries of other sequences (another block table over the same pool, one with
// evicted slots), some capturing their rows; each equal to the CPU's attention for its view.
TEST(KernelParity, BatchedAttentionOfAStepIsEachQuerysOwn) {
  const int heads = 6, kv_heads = 2, head_dim = 32, kv_dim = kv_heads * head_dim, tokens = 90;
  const std::pair<const char*, int> formats[] = {
      {"fp32", kKvF32}, {"int8", kKvInt8}, {"int4", kKvInt4}};
  for (int block_size : {1, 16}) {
    for (const auto& [name, code] : formats) {
      const KvFormat fmt = parse_kv_format(name, "test");
      test::QuantCache cache(fmt, fmt, block_size, tokens, kv_heads, head_dim);
      fill_random(cache, tokens, kv_dim, 71u);
      const KvSeqView a = cache.view();
      // Sequence B: the same pool's blocks in reverse order, 57 slots, every fourth evicted.
      const std::vector<BlockId> reversed(a.blocks.rbegin(), a.blocks.rend());
      std::vector<std::uint8_t> live(57, 1);
      for (int t = 0; t < 56; t += 4) live[static_cast<std::size_t>(t)] = 0;
      std::vector<KvSeqView> views;
      for (int i = 0; i < 20; ++i) {  // the chunk: slots 60..79 written, query i sees 0..60+i
        KvSeqView q = a;
        q.num_slots = 61 + i;
        views.push_back(q);
      }
      KvSeqView b = a;
      b.blocks = reversed;
      b.num_slots = 57;
      b.slot_live = live.data();
      views.push_back(b);
      KvSeqView first = a;
      first.num_slots = 1;
      views.push_back(first);
      const int n = static_cast<int>(views.size());
      const std::size_t qn = static_cast<std::size_t>(heads) * head_dim;
      const auto q = randn(qn * static_cast<std::size_t>(n), 73u, 2.0f);
      // The CPU, query by query; queries 3, 20 (B) and 21 capture.
      const auto captures = [](int i) { return i == 3 || i == 20 || i == 21; };
      std::vector<float> want(q.size()), scratch;
      CapturedRows rows;
      for (int i = 0; i < n; ++i) {
        cpu::paged_attention(views[static_cast<std::size_t>(i)], 0, {heads, kv_heads, head_dim},
                             q.data() + i * qn, want.data() + i * qn, 0,
                             captures(i) ? &rows : nullptr, scratch);
      }
      // The kernel: tables, meta and live maps as the backend stages them.
      std::vector<int> tables, meta;
      for (BlockId id : a.blocks) tables.push_back(static_cast<int>(id.value));
      for (BlockId id : reversed) tables.push_back(static_cast<int>(id.value));
      const int b_at = static_cast<int>(a.blocks.size());
      int weights_at = 0, max_slots = 0;
      for (int i = 0; i < n; ++i) {
        const KvSeqView& vw = views[static_cast<std::size_t>(i)];
        meta.insert(meta.end(),
                    {i == 20 ? b_at : 0, vw.num_slots, i == 20 ? 0 : -1,
                     captures(i) ? weights_at : -1, vw.num_slots, -1, vw.num_slots, -1});
        if (captures(i)) weights_at += heads * vw.num_slots;
        max_slots = std::max(max_slots, vw.num_slots);
      }
      PagedBatch pb;
      pb.k = tiles_of(cache.storage(), KvKind::kKey, code);
      pb.v = tiles_of(cache.storage(), KvKind::kValue, code);
      pb.k.group = pb.v.group = fmt.effective_group(kv_dim);
      pb.block_size = block_size;
      pb.kv_heads = kv_heads;
      pb.head_dim = head_dim;
      pb.tables = tables.data();
      pb.meta = meta.data();
      pb.live = live.data();
      std::vector<float> got(q.size()), weights(static_cast<std::size_t>(weights_at));
      launch_paged_attention_batch(got.data(), q.data(), pb, n, heads, max_slots, 64,
                                   weights.data());
      const std::string what = std::string(name) + " block size " + std::to_string(block_size);
      expect_close(got, want, 2e-6, 1e-4, what);
      expect_close(weights, rows.all, 1e-8, 1e-4, what + " captured weights");
    }
  }
}

}  // namespace
}  // namespace kvscope::kernels

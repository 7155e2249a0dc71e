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
        const auto k = randn(static_cast<std::size_t>(tokens) * kv_dim, 8u);
        const auto v = randn(static_cast<std::size_t>(tokens) * kv_dim, 9u);
        for (int t = 0; t < tokens; ++t) {
          cache.append(k.data() + static_cast<std::size_t>(t) * kv_dim,
                       v.data() + static_cast<std::size_t>(t) * kv_dim);
        }
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
  struct Rows : AttentionObserver {
    std::vector<float> all;
    void on_attention(int, int, int, std::span<const float> w) override {
      all.insert(all.end(), w.begin(), w.end());
    }
  };
  for (const Fmt& f : kFormats) {
    for (int tokens : {1, 300}) {
      const KvFormat fmt = parse_kv_format(f.name, "test");
      test::QuantCache cache(fmt, fmt, 16, tokens, kv_heads, head_dim);
      const auto k = randn(static_cast<std::size_t>(tokens) * kv_dim, 31u);
      const auto v = randn(static_cast<std::size_t>(tokens) * kv_dim, 32u);
      for (int t = 0; t < tokens; ++t) {
        cache.append(k.data() + static_cast<std::size_t>(t) * kv_dim,
                     v.data() + static_cast<std::size_t>(t) * kv_dim);
      }
      const auto q = randn(static_cast<std::size_t>(heads) * head_dim, 33u, 2.0f);
      const KvSeqView view = cache.view();
      std::vector<float> want(q.size()), got(q.size()), scratch;
      Rows rows;
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
  struct Rows : AttentionObserver {
    std::vector<float> all;
    void on_attention(int, int, int, std::span<const float> w) override {
      all.insert(all.end(), w.begin(), w.end());
    }
  };
  struct Case {
    const char* format;
    int block_size, tokens, chunk;
  };
  for (const Case c : {Case{"fp32", 16, 3000, 512}, Case{"fp32", 256, 13000, kSplitChunk},
                       Case{"int8", 16, 20000, kSplitChunk}, Case{"fp16", 1, 4097, kSplitChunk}}) {
    const KvFormat fmt = parse_kv_format(c.format, "test");
    test::QuantCache cache(fmt, fmt, c.block_size, c.tokens, kv_heads, head_dim);
    const auto k = randn(static_cast<std::size_t>(c.tokens) * kv_dim, 41u);
    const auto v = randn(static_cast<std::size_t>(c.tokens) * kv_dim, 42u);
    for (int t = 0; t < c.tokens; ++t) {
      cache.append(k.data() + static_cast<std::size_t>(t) * kv_dim,
                   v.data() + static_cast<std::size_t>(t) * kv_dim);
    }
    const auto q = randn(static_cast<std::size_t>(heads) * head_dim, 43u, 3.0f);
    const KvSeqView view = cache.view();
    std::vector<float> want(q.size()), got(q.size()), scratch;
    Rows rows;
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

}  // namespace
}  // namespace kvscope::kernels

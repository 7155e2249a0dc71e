// Every CUDA kernel in kernels/ops, executed on the SIMT emulator, against its CPU twin in
// engine/backend/cpu: block sizes, shapes and GQA ratios as the engine uses them. Tolerances are
// float rounding in sums of a different order (|got - want| <= atol + rtol * |want|); argmax is
// exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "kernels/ops/argmax.cuh"
#include "kernels/ops/paged_attention.cuh"
#include "kernels/ops/rmsnorm.cuh"
#include "kernels/ops/rope.cuh"
#include "kernels/ops/swiglu.cuh"
#include "tests/quant/kv_test_support.h"

namespace kvscope::kernels {
namespace {

std::vector<float> randn(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

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
        kv.k = reinterpret_cast<const float*>(st.tile(0, KvKind::kKey, BlockId(0)));
        kv.v = reinterpret_cast<const float*>(st.tile(0, KvKind::kValue, BlockId(0)));
        kv.tile_floats = static_cast<long>(st.layout().tile_bytes(KvKind::kKey) / sizeof(float));
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

}  // namespace
}  // namespace kvscope::kernels

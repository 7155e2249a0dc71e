// The real kernels of kernels/ops in the emulator's thread mode (one OS thread per CUDA thread),
// against plain references: under ThreadSanitizer (scripts/test.sh's third build) every shared-
// memory access they make between barriers is checked for races. No engine code: this file and
// simt_emulator_test.cpp make the kvscope_simt_tests binary that the TSan build runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/ops/argmax.cuh"
#include "kernels/ops/convert.cuh"
#include "kernels/ops/kv_fill.cuh"
#include "kernels/ops/kv_kivi.cuh"
#include "kernels/ops/kv_rotate.cuh"
#include "kernels/ops/kv_write.cuh"
#include "kernels/ops/mla.cuh"
#include "kernels/ops/paged_attention.cuh"
#include "kernels/ops/rmsnorm.cuh"
#include "kernels/ops/rope.cuh"
#include "kernels/ops/swiglu.cuh"
#include "tests/kernels/kernel_test_support.h"

namespace kvscope::kernels {
namespace {

// Runs the test body in thread mode, whatever the process's mode.
class SimtThreads : public ::testing::Test {
 protected:
  void SetUp() override {
    before_ = sim::mode();
    sim::set_mode(sim::Mode::kThreads);
  }
  void TearDown() override { sim::set_mode(before_); }

 private:
  sim::Mode before_ = sim::Mode::kFibers;
};

using test::randn;

TEST_F(SimtThreads, RmsNormAndSwiGluMatchTheirDefinitions) {
  const int rows = 2, n = 300;
  const auto x = randn(rows * n, 1), w = randn(n, 2);
  std::vector<float> got(x.size());
  launch_rmsnorm(got.data(), x.data(), w.data(), rows, n, 1e-5f, 96);
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += double(x[r * n + i]) * x[r * n + i];
    const double scale = 1.0 / std::sqrt(ss / n + 1e-5);
    for (int i = 0; i < n; ++i)
      ASSERT_NEAR(got[r * n + i], w[i] * x[r * n + i] * scale, 1e-4) << r << " " << i;
  }
  auto a = randn(1000, 3);
  const auto b = randn(1000, 4), a0 = a;
  launch_swiglu(a.data(), b.data(), 1000, 4, 64);
  for (int i = 0; i < 1000; ++i)
    ASSERT_NEAR(a[i], a0[i] / (1.0f + std::exp(-a0[i])) * b[i], 1e-5) << i;
}

TEST_F(SimtThreads, ArgmaxFindsTheFirstLargest) {
  std::vector<float> logits = randn(5000, 5);
  logits[1234] = 50.0f;
  logits[4321] = 50.0f;  // a tie: the lower index wins
  int out = -1;
  launch_argmax(&out, logits.data(), 1, 5000, 128);
  EXPECT_EQ(out, 1234);
}

// Quantize-on-write (a warp reduction per head) and paged attention in one pass and split-K,
// against attention computed from the kernel's own dequantized pool.
TEST_F(SimtThreads, KvWriteAndPagedAttentionOnePassAndSplitK) {
  const int heads = 4, kv_heads = 2, head_dim = 32, kv_dim = kv_heads * head_dim;
  const int block_size = 4, tokens = 37, blocks = 12;
  const long tile = static_cast<long>(block_size) * kv_dim + block_size * kv_heads * 2;  // int8
  std::vector<unsigned char> kpool(static_cast<std::size_t>(tile) * blocks), vpool(kpool.size());
  const KvTiles kt{kpool.data(), tile, kKvInt8}, vt{vpool.data(), tile, kKvInt8};
  std::vector<int> table = {7, 2, 9, 0, 11, 4, 1, 8, 3, 10};  // scattered
  const auto k = randn(static_cast<std::size_t>(tokens) * kv_dim, 6);
  const auto v = randn(k.size(), 7);
  for (int t = 0; t < tokens; ++t) {
    launch_kv_write(kt, vt, table.data(), t, block_size, &k[static_cast<std::size_t>(t) * kv_dim],
                    &v[static_cast<std::size_t>(t) * kv_dim], kv_heads, head_dim);
  }
  PagedKv kv;
  kv.k = kt;
  kv.v = vt;
  kv.block_table = table.data();
  kv.num_slots = tokens;
  kv.block_size = block_size;
  kv.kv_heads = kv_heads;
  kv.head_dim = head_dim;
  const auto q = randn(static_cast<std::size_t>(heads) * head_dim, 8);
  // The reference: softmax attention over what the pool holds.
  std::vector<double> want(q.size());
  for (int h = 0; h < heads; ++h) {
    const int g = h / (heads / kv_heads);
    std::vector<double> s(tokens);
    double m = -1e300, sum = 0;
    for (int t = 0; t < tokens; ++t) {
      double dot = 0;
      for (int d = 0; d < head_dim; ++d) {
        dot += double(q[h * head_dim + d]) * kv_load(kt, table[t / block_size], t % block_size,
                                                     g * head_dim + d, g, kv_dim, kv_heads,
                                                     block_size);
      }
      s[t] = dot / std::sqrt(double(head_dim));
      m = std::max(m, s[t]);
    }
    for (double& x : s) sum += (x = std::exp(x - m));
    for (int d = 0; d < head_dim; ++d) {
      double acc = 0;
      for (int t = 0; t < tokens; ++t) {
        acc += s[t] * kv_load(vt, table[t / block_size], t % block_size, g * head_dim + d, g,
                              kv_dim, kv_heads, block_size);
      }
      want[h * head_dim + d] = acc / sum;
    }
  }
  std::vector<float> one(q.size()), split(q.size());
  launch_paged_attention(one.data(), q.data(), kv, heads, 64);
  std::vector<float> work(
      static_cast<std::size_t>(split_workspace_floats(heads, head_dim, tokens, 8)));
  launch_paged_attention_split(split.data(), q.data(), kv, heads, 8, work.data(), 64);
  for (std::size_t i = 0; i < q.size(); ++i) {
    ASSERT_NEAR(one[i], want[i], 1e-4) << "one pass " << i;
    ASSERT_NEAR(split[i], want[i], 1e-4) << "split-K " << i;
  }
}

// KIVI: a filled group handed over (keys per channel by one thread per byte of a row, values per
// token by the group store with its barrier), then attention whose last four slots are the open
// group's full-precision rows: each decoded key within half a step of its channel's range over
// the group, and attention equal to a reference over what the pool and the rows hold.
TEST_F(SimtThreads, KiviHandOverAndOpenGroupAttention) {
  const int heads = 4, kv_heads = 2, head_dim = 32, kv_dim = kv_heads * head_dim;
  const int block_size = 4, residual = 8, group = 16, tokens = 12;       // one group closed, 4 open
  const long row = kv_dim / 2;                                           // 4-bit codes
  const long k_tile = block_size * row + static_cast<long>(kv_dim) * 4;  // one channel-scale set
  const long v_tile = block_size * (row + kv_dim / group * 4);
  std::vector<unsigned char> kpool(static_cast<std::size_t>(k_tile) * 4);
  std::vector<unsigned char> vpool(static_cast<std::size_t>(v_tile) * 4);
  const KvTiles kt{kpool.data(), k_tile, kKvKiviKey4, group, residual};
  const KvTiles vt{vpool.data(), v_tile, kKvInt4, group, residual};
  const int table[3] = {2, 0, 3};
  auto k = randn(static_cast<std::size_t>(tokens) * kv_dim, 31);
  const auto v = randn(k.size(), 32);
  for (int t = 0; t < tokens; ++t) k[static_cast<std::size_t>(t) * kv_dim + 3] *= 25.0f;
  launch_kivi_flush(kt, true, table, 0, block_size, k.data(), kv_dim);
  launch_kivi_flush(vt, false, table, 0, block_size, v.data(), kv_dim);
  const auto load = [&](const KvTiles& t, int slot, int e) {
    return kv_load(t, table[slot / block_size], slot % block_size, e, e / head_dim, kv_dim,
                   kv_heads, block_size);
  };
  for (int c = 0; c < kv_dim; ++c) {
    float lo = k[c], hi = k[c];
    for (int t = 0; t < residual; ++t) {
      lo = std::min(lo, k[static_cast<std::size_t>(t) * kv_dim + c]);
      hi = std::max(hi, k[static_cast<std::size_t>(t) * kv_dim + c]);
    }
    for (int t = 0; t < residual; ++t) {
      ASSERT_NEAR(load(kt, t, c), k[static_cast<std::size_t>(t) * kv_dim + c],
                  0.5f * (hi - lo) / 15.0f + 2e-2f)
          << "key channel " << c << " token " << t;
    }
  }
  PagedKv kv;
  kv.k = kt;
  kv.v = vt;
  kv.block_table = table;
  kv.num_slots = tokens;
  kv.block_size = block_size;
  kv.kv_heads = kv_heads;
  kv.head_dim = head_dim;
  kv.open_k = k.data() + static_cast<std::size_t>(residual) * kv_dim;
  kv.open_v = v.data() + static_cast<std::size_t>(residual) * kv_dim;
  kv.open_k_start = kv.open_v_start = residual;
  const auto value = [&](const KvTiles& t, const std::vector<float>& raw, int slot, int e) {
    return slot >= residual ? double(raw[static_cast<std::size_t>(slot) * kv_dim + e])
                            : double(load(t, slot, e));
  };
  const auto q = randn(static_cast<std::size_t>(heads) * head_dim, 33);
  std::vector<double> want(q.size());
  for (int h = 0; h < heads; ++h) {
    const int g = h / (heads / kv_heads);
    std::vector<double> sc(tokens);
    double m = -1e300, sum = 0;
    for (int t = 0; t < tokens; ++t) {
      double dot = 0;
      for (int d = 0; d < head_dim; ++d)
        dot += double(q[h * head_dim + d]) * value(kt, k, t, g * head_dim + d);
      sc[t] = dot / std::sqrt(double(head_dim));
      m = std::max(m, sc[t]);
    }
    for (double& x : sc) sum += (x = std::exp(x - m));
    for (int d = 0; d < head_dim; ++d) {
      double acc = 0;
      for (int t = 0; t < tokens; ++t) acc += sc[t] * value(vt, v, t, g * head_dim + d);
      want[h * head_dim + d] = acc / sum;
    }
  }
  std::vector<float> got(q.size());
  launch_paged_attention(got.data(), q.data(), kv, heads, 64);
  for (std::size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4) << i;
}

// MLA mode B: the absorbed query (the nope dims gathered into shared memory, a barrier, then the
// product with W_uk) and the latent attention (scores in shared memory, block max and sum, a
// barrier before the context reads every weight), against plain references (position 0, where
// RoPE is the identity).
TEST_F(SimtThreads, MlaAbsorbedQueryAndLatentAttention) {
  const int heads = 4, kv_heads = 2, head_dim = 8, nope = 6, rope = 2, rank = 12;
  const int block_size = 4, tokens = 10;
  std::vector<int> nope_index, rope_index;
  for (int g = 0; g < kv_heads; ++g) {
    for (int d = 0; d < head_dim; ++d) (d < rope ? rope_index : nope_index).push_back(d);
  }
  const auto q = randn(static_cast<std::size_t>(heads) * head_dim, 51);
  const auto w_uk = randn(static_cast<std::size_t>(kv_heads) * nope * rank, 52);
  std::vector<float> q_lat(static_cast<std::size_t>(heads) * rank), q_rope(heads * rope);
  launch_mla_absorb_query(q_lat.data(), q_rope.data(), q.data(), w_uk.data(), nope_index.data(),
                          rope_index.data(), heads, kv_heads, head_dim, nope, rope, rank, 0,
                          10000.0f);
  for (int h = 0; h < heads; ++h) {
    const int g = h / (heads / kv_heads);
    for (int r = 0; r < rank; ++r) {
      double want = 0;
      for (int j = 0; j < nope; ++j) {
        want += double(q[h * head_dim + nope_index[g * nope + j]]) *
                w_uk[(static_cast<std::size_t>(g) * nope + j) * rank + r];
      }
      ASSERT_NEAR(q_lat[static_cast<std::size_t>(h) * rank + r], want, 1e-5) << h << " " << r;
    }
    for (int j = 0; j < rope; ++j) ASSERT_EQ(q_rope[h * rope + j], q[h * head_dim + j]);
  }
  // fp32 tiles: latents [block][rank], RoPE keys [block][kv_heads][rope].
  const int table[3] = {2, 0, 1};
  const auto lat = randn(static_cast<std::size_t>(3) * block_size * rank, 53);
  const auto keys = randn(static_cast<std::size_t>(3) * block_size * kv_heads * rope, 54);
  LatentKv kv;
  kv.latents = {reinterpret_cast<unsigned char*>(const_cast<float*>(lat.data())),
                static_cast<long>(block_size) * rank * 4, kKvF32, 0, 0};
  kv.rope = {reinterpret_cast<unsigned char*>(const_cast<float*>(keys.data())),
             static_cast<long>(block_size) * kv_heads * rope * 4, kKvF32, 0, 0};
  kv.block_table = table;
  kv.num_slots = tokens;
  kv.block_size = block_size;
  kv.rank = rank;
  kv.rope_heads = kv_heads;
  kv.rope_dim = rope;
  std::vector<float> ctx(static_cast<std::size_t>(heads) * rank), w(heads * tokens);
  launch_mla_latent_attention(ctx.data(), w.data(), q_lat.data(), q_rope.data(), kv, heads, 4.0f);
  const auto c_at = [&](int t, int r) {
    return double(
        lat[(static_cast<std::size_t>(table[t / block_size]) * block_size + t % block_size) * rank +
            r]);
  };
  for (int h = 0; h < heads; ++h) {
    const int rh = h * kv_heads / heads;
    std::vector<double> s(tokens);
    double m = -1e300, sum = 0;
    for (int t = 0; t < tokens; ++t) {
      double dot = 0;
      for (int r = 0; r < rank; ++r)
        dot += q_lat[static_cast<std::size_t>(h) * rank + r] * c_at(t, r);
      const std::size_t kr =
          ((static_cast<std::size_t>(table[t / block_size]) * block_size + t % block_size) *
               kv_heads +
           rh) *
          rope;
      for (int j = 0; j < rope; ++j) dot += double(q_rope[h * rope + j]) * keys[kr + j];
      s[t] = dot / 4.0;
      m = std::max(m, s[t]);
    }
    for (double& x : s) sum += (x = std::exp(x - m));
    for (int t = 0; t < tokens; ++t) ASSERT_NEAR(w[h * tokens + t], s[t] / sum, 1e-5) << h << t;
    for (int r = 0; r < rank; ++r) {
      double want = 0;
      for (int t = 0; t < tokens; ++t) want += s[t] / sum * c_at(t, r);
      ASSERT_NEAR(ctx[static_cast<std::size_t>(h) * rank + r], want, 1e-5) << h << " " << r;
    }
  }
  // Split-K (past the one-pass limit on a GPU; here in chunks of 5 slots): each chunk's block
  // and the reduction, every thread an OS thread, give the one pass's context and rows.
  const int chunk = 5;
  std::vector<float> work(
      static_cast<std::size_t>(split_workspace_floats(heads, rank, tokens, chunk)));
  std::vector<float> ctx_split(ctx.size()), w_split(w.size());
  launch_mla_latent_attention_split(ctx_split.data(), w_split.data(), q_lat.data(), q_rope.data(),
                                    kv, heads, 4.0f, chunk, work.data());
  for (std::size_t i = 0; i < ctx.size(); ++i) ASSERT_NEAR(ctx_split[i], ctx[i], 1e-5) << i;
  for (std::size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(w_split[i], w[i], 1e-6) << i;
}

TEST_F(SimtThreads, RopeAndTheSixteenBitConversion) {
  const int q_dim = 128, kv_dim = 64, head_dim = 32;
  auto q = randn(q_dim, 9), k = randn(kv_dim, 10);
  const auto q0 = q, k0 = k;
  const int pos = 77;
  launch_rope(q.data(), k.data(), &pos, 1, q_dim, kv_dim, head_dim, 10000.0f);
  for (int i = 0; i < q_dim; i += 2) {  // adjacent pairs, angle pos * theta^(-(i % d) / d)
    const double a = pos * std::pow(10000.0, -double(i % head_dim) / head_dim);
    ASSERT_NEAR(q[i], q0[i] * std::cos(a) - q0[i + 1] * std::sin(a), 1e-4) << i;
    ASSERT_NEAR(q[i + 1], q0[i] * std::sin(a) + q0[i + 1] * std::cos(a), 1e-4) << i;
  }
  for (int i = 0; i < kv_dim; i += 2) {
    const double a = pos * std::pow(10000.0, -double(i % head_dim) / head_dim);
    ASSERT_NEAR(k[i], k0[i] * std::cos(a) - k0[i + 1] * std::sin(a), 1e-4) << i;
  }
  const auto x = randn(3000, 11);
  std::vector<std::uint16_t> h(x.size());
  launch_to_16bit(h.data(), x.data(), static_cast<long>(x.size()), false);
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(h[i], simt::f16_bits(x[i])) << i;
}

// int4 rows (the group kernel: scales stored, a barrier, then packed bytes) and a filled pool:
// what the kernels write decodes to the values within half a quantization step.
TEST_F(SimtThreads, GroupedQuantizeOnWriteAndFill) {
  const int kv_heads = 2, head_dim = 32, kv_dim = kv_heads * head_dim, block_size = 4;
  const int group = 16, groups = kv_dim / group;
  const long tile = static_cast<long>(block_size) * kv_dim / 2 + block_size * groups * 4;
  std::vector<unsigned char> kpool(static_cast<std::size_t>(tile) * 2), vpool(kpool.size());
  const KvTiles kt{kpool.data(), tile, kKvInt4, group}, vt{vpool.data(), tile, kKvInt4, group};
  const int table[2] = {1, 0};
  const auto k = randn(kv_dim, 12), v = randn(kv_dim, 13);
  launch_kv_write(kt, vt, table, 5, block_size, k.data(), v.data(), kv_heads, head_dim);
  for (int e = 0; e < kv_dim; ++e) {
    const int g0 = e / group * group;
    float lo = k[g0], hi = k[g0];
    for (int i = g0; i < g0 + group; ++i) {
      lo = std::min(lo, k[i]);
      hi = std::max(hi, k[i]);
    }
    const float step = (hi - lo) / 15.0f;
    ASSERT_NEAR(kv_load(kt, table[1], 1, e, e / head_dim, kv_dim, kv_heads, block_size), k[e],
                0.5f * step + 2e-3f)
        << e;
  }
  std::vector<unsigned char> pool(static_cast<std::size_t>(tile) * 3);
  const KvTiles ft{pool.data(), tile, kKvInt4, group};
  launch_kv_fill(ft, 3, block_size, kv_heads, head_dim, 7);
  for (int b = 0; b < 3; ++b)
    for (int o = 0; o < block_size; ++o)
      for (int e = 0; e < kv_dim; ++e) {
        const float x = kv_load(ft, b, o, e, e / head_dim, kv_dim, kv_heads, block_size);
        ASSERT_TRUE(x >= -0.5f && x <= 0.5f) << b << " " << o << " " << e << ": " << x;
      }
}

// Token eviction on the device: key re-rotation (a row loaded into shared memory, a barrier, the
// pairs rotated, a barrier, the row stored: per-head for fp32, int4 groups with their own
// barrier) in two layers of a pool, then attention that skips evicted slots, one pass, split-K,
// and the batch kernel (a step's causal queries in one launch).
TEST_F(SimtThreads, KeyRotationAndAttentionOverEvictedSlots) {
  const int heads = 4, kv_heads = 2, head_dim = 32, kv_dim = kv_heads * head_dim;
  const int block_size = 4, tokens = 21, blocks = 6, layers = 2;
  const long tile = static_cast<long>(block_size) * kv_dim * 4;  // fp32
  std::vector<unsigned char> kpool(static_cast<std::size_t>(tile) * blocks * layers),
      vpool(kpool.size());
  const std::vector<int> table = {4, 1, 5, 0, 3, 2};
  const auto k = randn(static_cast<std::size_t>(tokens) * kv_dim, 14);
  const auto v = randn(k.size(), 15);
  for (int layer = 0; layer < layers; ++layer) {
    const long at = static_cast<long>(layer) * blocks * tile;
    const KvTiles kt{kpool.data() + at, tile, kKvF32}, vt{vpool.data() + at, tile, kKvF32};
    for (int t = 0; t < tokens; ++t) {
      launch_kv_write(kt, vt, table.data(), t, block_size, &k[static_cast<std::size_t>(t) * kv_dim],
                      &v[static_cast<std::size_t>(t) * kv_dim], kv_heads, head_dim);
    }
  }
  // Slots 3, 9 and 20 move down 2, 5 and 11 positions, in both layers.
  const int slots[3] = {3, 9, 20}, deltas[3] = {-2, -5, -11};
  std::vector<int> rot;
  for (int i = 0; i < 3; ++i) {
    rot.push_back(table[static_cast<std::size_t>(slots[i] / block_size)]);
    rot.push_back(slots[i] % block_size);
    rot.push_back(deltas[i]);
  }
  const KvTiles k0{kpool.data(), tile, kKvF32};
  launch_kv_rotate_keys(k0, static_cast<long>(blocks) * tile, layers, rot.data(), 3, block_size,
                        kv_heads, head_dim, 10000.0f);
  std::vector<double> rotated(k.begin(), k.end());  // the reference keys after the shift
  for (int i = 0; i < 3; ++i) {
    double* x = &rotated[static_cast<std::size_t>(slots[i]) * kv_dim];
    for (int e = 0; e < kv_dim; e += 2) {
      const double a = deltas[i] * std::pow(10000.0, -double(e % head_dim) / head_dim);
      const double x0 = x[e], x1 = x[e + 1];
      x[e] = x0 * std::cos(a) - x1 * std::sin(a);
      x[e + 1] = x0 * std::sin(a) + x1 * std::cos(a);
    }
  }
  for (int layer = 0; layer < layers; ++layer) {
    const KvTiles kt{kpool.data() + static_cast<long>(layer) * blocks * tile, tile, kKvF32};
    for (int t = 0; t < tokens; ++t) {
      for (int e = 0; e < kv_dim; ++e) {
        ASSERT_NEAR(kv_load(kt, table[static_cast<std::size_t>(t / block_size)], t % block_size, e,
                            e / head_dim, kv_dim, kv_heads, block_size),
                    rotated[static_cast<std::size_t>(t) * kv_dim + e], 1e-5)
            << "layer " << layer << " slot " << t << " value " << e;
      }
    }
  }

  // int4 keys: the rotated row re-fitted to its groups, within half a step of the rotation.
  const int group = 16, groups = kv_dim / group;
  const long tile4 = static_cast<long>(block_size) * kv_dim / 2 + block_size * groups * 4;
  std::vector<unsigned char> k4(static_cast<std::size_t>(tile4) * 2), v4(k4.size());
  const KvTiles kt4{k4.data(), tile4, kKvInt4, group}, vt4{v4.data(), tile4, kKvInt4, group};
  const int table4[2] = {1, 0};
  launch_kv_write(kt4, vt4, table4, 6, block_size, k.data(), v.data(), kv_heads, head_dim);
  std::vector<double> want(static_cast<std::size_t>(kv_dim));
  for (int e = 0; e < kv_dim; e += 2) {
    const double a = -7 * std::pow(10000.0, -double(e % head_dim) / head_dim);
    const double x0 = kv_load(kt4, 0, 2, e, e / head_dim, kv_dim, kv_heads, block_size);
    const double x1 = kv_load(kt4, 0, 2, e + 1, e / head_dim, kv_dim, kv_heads, block_size);
    want[static_cast<std::size_t>(e)] = x0 * std::cos(a) - x1 * std::sin(a);
    want[static_cast<std::size_t>(e) + 1] = x0 * std::sin(a) + x1 * std::cos(a);
  }
  const int rot4[3] = {0, 2, -7};
  launch_kv_rotate_keys(kt4, 0, 1, rot4, 1, block_size, kv_heads, head_dim, 10000.0f);
  for (int e = 0; e < kv_dim; ++e) {
    const auto g0 = static_cast<std::size_t>(e / group * group);
    const auto [lo, hi] = std::minmax_element(want.begin() + static_cast<long>(g0),
                                              want.begin() + static_cast<long>(g0) + group);
    ASSERT_NEAR(kv_load(kt4, 0, 2, e, e / head_dim, kv_dim, kv_heads, block_size),
                want[static_cast<std::size_t>(e)], 0.5 * (*hi - *lo) / 15.0 + 2e-3)
        << "int4 value " << e;
  }

  // Attention in layer 1 with every third slot evicted.
  std::vector<unsigned char> live(static_cast<std::size_t>(tokens), 1);
  for (int t = 0; t < tokens - 1; t += 3) live[static_cast<std::size_t>(t)] = 0;
  PagedKv kv;
  kv.k = {kpool.data() + static_cast<long>(blocks) * tile, tile, kKvF32};
  kv.v = {vpool.data() + static_cast<long>(blocks) * tile, tile, kKvF32};
  kv.block_table = table.data();
  kv.num_slots = tokens;
  kv.block_size = block_size;
  kv.kv_heads = kv_heads;
  kv.head_dim = head_dim;
  kv.live = live.data();
  const auto q = randn(static_cast<std::size_t>(heads) * head_dim, 16);
  std::vector<double> out(q.size());
  for (int h = 0; h < heads; ++h) {
    const int g = h / (heads / kv_heads);
    std::vector<double> s(static_cast<std::size_t>(tokens), 0.0);
    double m = -1e300, sum = 0;
    for (int t = 0; t < tokens; ++t) {
      if (live[static_cast<std::size_t>(t)] == 0) continue;
      double dot = 0;
      for (int d = 0; d < head_dim; ++d)
        dot += double(q[static_cast<std::size_t>(h * head_dim + d)]) *
               rotated[static_cast<std::size_t>(t * kv_dim + g * head_dim + d)];
      s[static_cast<std::size_t>(t)] = dot / std::sqrt(double(head_dim));
      m = std::max(m, s[static_cast<std::size_t>(t)]);
    }
    for (int t = 0; t < tokens; ++t) {
      double& x = s[static_cast<std::size_t>(t)];
      x = live[static_cast<std::size_t>(t)] != 0 ? std::exp(x - m) : 0.0;
      sum += x;
    }
    for (int d = 0; d < head_dim; ++d) {
      double acc = 0;
      for (int t = 0; t < tokens; ++t)
        acc += s[static_cast<std::size_t>(t)] *
               v[static_cast<std::size_t>(t * kv_dim + g * head_dim + d)];
      out[static_cast<std::size_t>(h * head_dim + d)] = acc / sum;
    }
  }
  std::vector<float> one(q.size()), split(q.size());
  launch_paged_attention(one.data(), q.data(), kv, heads, 64);
  std::vector<float> work(
      static_cast<std::size_t>(split_workspace_floats(heads, head_dim, tokens, 3)));
  launch_paged_attention_split(split.data(), q.data(), kv, heads, 3, work.data(), 64);
  for (std::size_t i = 0; i < q.size(); ++i) {
    ASSERT_NEAR(one[i], out[i], 1e-4) << "one pass " << i;
    ASSERT_NEAR(split[i], out[i], 1e-4) << "split-K " << i;
  }

  // The batch kernel: three causal queries of a chunk (the last with the evicted slots), each the
  // one-pass kernel's answer for its own view.
  // kBatchMeta ints per query: table, slots, live, weights, then no open KIVI group.
  const std::vector<int> meta = {0, tokens - 2, -1, -1, tokens, -1, tokens, -1,
                                 0, tokens - 1, -1, -1, tokens, -1, tokens, -1,
                                 0, tokens,     0,  -1, tokens, -1, tokens, -1};
  PagedBatch pb;
  pb.k = kv.k;
  pb.v = kv.v;
  pb.block_size = block_size;
  pb.kv_heads = kv_heads;
  pb.head_dim = head_dim;
  pb.tables = table.data();
  pb.meta = meta.data();
  pb.live = live.data();
  const auto q3 = randn(q.size() * 3, 17);
  std::vector<float> batched(q3.size());
  launch_paged_attention_batch(batched.data(), q3.data(), pb, 3, heads, tokens, 64);
  for (int i = 0; i < 3; ++i) {
    PagedKv own = kv;
    own.num_slots = tokens - 2 + i;
    own.live = i == 2 ? live.data() : nullptr;
    std::vector<float> alone(q.size());
    launch_paged_attention(alone.data(), q3.data() + static_cast<long>(i) * q.size(), own, heads,
                           64);
    for (std::size_t e = 0; e < q.size(); ++e)
      ASSERT_EQ(batched[static_cast<std::size_t>(i) * q.size() + e], alone[e]) << "query " << i;
  }
}

}  // namespace
}  // namespace kvscope::kernels

// CPU ops with fast paths that must not change the result: the fused matmul over a shared input
// (one parallel region for Q/K/V or gate/up; bit-identical to separate products) and RoPE's
// per-call angle table.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/common/openmp.h"

namespace kvscope::cpu {
namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Restores the OpenMP thread count a test changed.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(saved_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int saved_;
};

TEST(CpuMatmul, SharedInputIsBitIdenticalToSeparateProducts) {
  // Shapes on both sides of the parallel threshold, and odd row counts so the split between
  // threads falls inside an output and not on a boundary.
  struct Shape {
    int n;
    std::vector<int> ds;
  };
  const std::vector<Shape> shapes = {
      {64, {64, 32, 32}}, {768, {768, 768, 768}}, {300, {1001, 7, 513}}};
  for (int threads : {1, 2, 3}) {
    const ThreadCount tc(threads);
    for (const Shape& s : shapes) {
      const std::vector<float> x = random_floats(static_cast<std::size_t>(s.n), 1);
      std::vector<std::vector<float>> w, fused, separate;
      std::vector<MatmulOut> outs;
      for (std::size_t i = 0; i < s.ds.size(); ++i) {
        const auto d = static_cast<std::size_t>(s.ds[i]);
        w.push_back(
            random_floats(d * static_cast<std::size_t>(s.n), 10 + static_cast<unsigned>(i)));
        fused.emplace_back(d, -1.0f);
        separate.emplace_back(d, -2.0f);
      }
      for (std::size_t i = 0; i < s.ds.size(); ++i) {
        outs.push_back({fused[i].data(), w[i].data(), s.ds[i]});
        matmul(separate[i].data(), x.data(), w[i].data(), s.n, s.ds[i]);
      }
      matmul_shared_input(x.data(), s.n, outs);
      for (std::size_t i = 0; i < s.ds.size(); ++i) {
        EXPECT_EQ(0,
                  std::memcmp(fused[i].data(), separate[i].data(), fused[i].size() * sizeof(float)))
            << "threads " << threads << ", n " << s.n << ", output " << i;
      }
    }
  }
}

TEST(CpuMatmul, EveryRowIsTheDotProductOfItsWeightRow) {
  const ThreadCount tc(2);
  const int n = 512, d = 640;  // above the parallel threshold
  const std::vector<float> x = random_floats(n, 3),
                           w = random_floats(static_cast<std::size_t>(n) * d, 4);
  std::vector<float> out(d);
  matmul(out.data(), x.data(), w.data(), n, d);
  for (int r = 0; r < d; ++r) {
    double ref = 0.0;
    for (int j = 0; j < n; ++j)
      ref += static_cast<double>(w[static_cast<std::size_t>(r) * n + j]) *
             x[static_cast<std::size_t>(j)];
    EXPECT_NEAR(out[static_cast<std::size_t>(r)], ref, 1e-3) << "row " << r;
  }
}

// llama2.c's RoPE, one pair at a time, angles recomputed for every pair.
void rope_reference(float* q, float* k, int pos, int q_dim, int kv_dim, int head_dim, float theta) {
  for (int i = 0; i < q_dim; i += 2) {
    const int hd = i % head_dim;
    const float freq =
        1.0f / std::pow(theta, static_cast<float>(hd) / static_cast<float>(head_dim));
    const float val = static_cast<float>(pos) * freq;
    const float fcr = std::cos(val), fci = std::sin(val);
    for (float* v : {q, k}) {
      if (v == k && i >= kv_dim) continue;
      const float v0 = v[i], v1 = v[i + 1];
      v[i] = v0 * fcr - v1 * fci;
      v[i + 1] = v0 * fci + v1 * fcr;
    }
  }
}

TEST(CpuRope, AngleTableGivesThePerPairRotation) {
  struct Shape {
    int q_dim, kv_dim, head_dim;
  };
  // GQA (k shorter than q), MHA, and a head wider than the table (the per-pair fallback).
  for (const Shape& s : {Shape{64, 32, 8}, Shape{768, 768, 64}, Shape{1028, 1028, 514}}) {
    for (int pos : {0, 1, 37, 511, 4095}) {
      std::vector<float> q = random_floats(static_cast<std::size_t>(s.q_dim), 5);
      std::vector<float> k = random_floats(static_cast<std::size_t>(s.kv_dim), 6);
      std::vector<float> q_ref = q, k_ref = k;
      rope(q.data(), k.data(), pos, s.q_dim, s.kv_dim, s.head_dim, 10000.0f);
      rope_reference(q_ref.data(), k_ref.data(), pos, s.q_dim, s.kv_dim, s.head_dim, 10000.0f);
      // Same angles, same products: equal up to how each translation unit contracts a*b - c*d
      // into fma, and up to the last bit of pow(): cpu_ops.cpp is built with reassociation, and
      // Clang (the browser build's) computes 1/pow(theta, x) differently from this file. One ulp
      // of freq moves the angle pos * freq by up to pos ulps of 1, and a rotated value by that
      // much times |v0| + |v1|. (The generation golden tests pin the engine's bits against
      // llama2.c.)
      const float angle_slack = 8.0f * static_cast<float>(pos) * FLT_EPSILON;
      for (std::size_t i = 0; i < q.size(); ++i)
        ASSERT_NEAR(q[i], q_ref[i], 1e-6f * (1.0f + std::fabs(q_ref[i])) + angle_slack)
            << "q[" << i << "] head_dim " << s.head_dim << " pos " << pos;
      for (std::size_t i = 0; i < k.size(); ++i)
        ASSERT_NEAR(k[i], k_ref[i], 1e-6f * (1.0f + std::fabs(k_ref[i])) + angle_slack)
            << "k[" << i << "] head_dim " << s.head_dim << " pos " << pos;
    }
  }
}

}  // namespace
}  // namespace kvscope::cpu

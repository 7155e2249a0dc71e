// MLA conversion: the SVD is a true factorization, and full-rank latents reproduce K and V.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/common/error.h"
#include "engine/mla/latent.h"
#include "engine/mla/svd.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

void expect_reconstructs(const std::vector<double>& a, int rows, int cols) {
  Svd d = svd(a, rows, cols);
  ASSERT_EQ(d.rank, std::min(rows, cols));
  for (int k = 1; k < d.rank; ++k) EXPECT_GE(d.s[k - 1], d.s[k]);
  double max_err = 0;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      double x = 0;
      for (int k = 0; k < d.rank; ++k) x += d.u[i * d.rank + k] * d.s[k] * d.v[j * d.rank + k];
      max_err = std::max(max_err, std::fabs(x - a[i * cols + j]));
    }
  EXPECT_LT(max_err, 1e-9);
  for (int p = 0; p < d.rank; ++p)  // V has orthonormal columns
    for (int q = 0; q < d.rank; ++q) {
      double dot = 0;
      for (int j = 0; j < cols; ++j) dot += d.v[j * d.rank + p] * d.v[j * d.rank + q];
      EXPECT_NEAR(dot, p == q ? 1.0 : 0.0, 1e-9);
    }
}

TEST(Svd, ReconstructsTallWideAndSquareMatrices) {
  std::mt19937 rng(3);
  std::normal_distribution<double> nd;
  for (auto [r, c] : {std::pair{12, 5}, std::pair{5, 12}, std::pair{9, 9}}) {
    std::vector<double> a(r * c);
    for (auto& x : a) x = nd(rng);
    expect_reconstructs(a, r, c);
  }
}

TEST(Svd, FindsAKnownLowRank) {
  // Outer product of two vectors: one nonzero singular value equal to |x| |y|.
  std::vector<double> x = {1, 2, 3}, y = {4, 0, -1, 2};
  std::vector<double> a;
  for (double xi : x)
    for (double yj : y) a.push_back(xi * yj);
  Svd d = svd(a, 3, 4);
  EXPECT_NEAR(d.s[0], std::sqrt(14.0) * std::sqrt(21.0), 1e-9);
  EXPECT_NEAR(d.s[1], 0.0, 1e-9);
}

TEST(MlaConversion, FullRankLatentsReproduceKeysAndValuesOfStories260K) {
  const Model& m = *test::real_model().model;
  const ModelConfig& c = m.config();
  MlaConversion conv = convert_to_mla(m, std::min(2 * c.kv_dim(), c.dim));
  ASSERT_EQ(conv.layers.size(), static_cast<std::size_t>(c.n_layers));
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::vector<float> x(c.dim);
  for (auto& v : x) v = nd(rng);
  for (int l = 0; l < c.n_layers; ++l) {
    EXPECT_NEAR(conv.energy_kept[l], 1.0, 1e-12);
    const MlaLayer& L = conv.layers[l];
    std::vector<double> latent(L.rank, 0.0);
    for (int r = 0; r < L.rank; ++r)
      for (int j = 0; j < c.dim; ++j) latent[r] += double(L.w_dkv[r * c.dim + j]) * x[j];
    for (int i = 0; i < c.kv_dim(); ++i) {
      double k = 0, v = 0, k_ref = 0, v_ref = 0;
      for (int r = 0; r < L.rank; ++r) {
        k += L.w_uk[i * L.rank + r] * latent[r];
        v += L.w_uv[i * L.rank + r] * latent[r];
      }
      for (int j = 0; j < c.dim; ++j) {
        k_ref += double(m.weights().wk[(long(l) * c.kv_dim() + i) * c.dim + j]) * x[j];
        v_ref += double(m.weights().wv[(long(l) * c.kv_dim() + i) * c.dim + j]) * x[j];
      }
      EXPECT_NEAR(k, k_ref, 1e-4) << "layer " << l << " row " << i;
      EXPECT_NEAR(v, v_ref, 1e-4) << "layer " << l << " row " << i;
    }
  }
}

TEST(MlaConversion, EnergyGrowsWithRankAndBadRankIsAnError) {
  const Model& m = *test::real_model().model;
  double prev = 0;
  for (int r : {4, 16, 32, 64}) {
    MlaConversion conv = convert_to_mla(m, r);
    EXPECT_GT(conv.energy_kept[0], prev);
    prev = conv.energy_kept[0];
  }
  EXPECT_THROW(convert_to_mla(m, 0), Error);
  EXPECT_THROW(convert_to_mla(m, 65), Error);
}

}  // namespace
}  // namespace kvscope

// One-sided Jacobi SVD: rotate column pairs of a working copy until all columns are orthogonal;
// column norms are then the singular values, normalized columns U, accumulated rotations V.
#include "engine/mla/svd.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kvscope {

Svd svd(const std::vector<double>& a, int rows, int cols, double tol, int max_sweeps) {
  // Work on the orientation with more rows than columns so the column count is the rank.
  const bool transposed = rows < cols;
  const int m = transposed ? cols : rows;                  // working rows
  const int n = transposed ? rows : cols;                  // working columns (= rank)
  std::vector<double> w(static_cast<std::size_t>(m) * n);  // [m][n]
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      const double x = a[static_cast<std::size_t>(i) * cols + j];
      if (transposed)
        w[static_cast<std::size_t>(j) * n + i] = x;
      else
        w[static_cast<std::size_t>(i) * n + j] = x;
    }
  std::vector<double> vv(static_cast<std::size_t>(n) * n, 0.0);  // [n][n] accumulated rotations
  for (int i = 0; i < n; ++i) vv[static_cast<std::size_t>(i) * n + i] = 1.0;

  auto col = [&](std::vector<double>& mat, int stride, int r, int c) -> double& {
    return mat[static_cast<std::size_t>(r) * stride + c];
  };
  for (int sweep = 0; sweep < max_sweeps; ++sweep) {
    double off = 0.0;
    for (int p = 0; p < n - 1; ++p) {
      for (int q = p + 1; q < n; ++q) {
        double alpha = 0, beta = 0, gamma = 0;
        for (int i = 0; i < m; ++i) {
          const double x = col(w, n, i, p), y = col(w, n, i, q);
          alpha += x * x;
          beta += y * y;
          gamma += x * y;
        }
        if (alpha == 0.0 || beta == 0.0) continue;
        const double corr = std::fabs(gamma) / std::sqrt(alpha * beta);
        off = std::max(off, corr);
        if (corr < tol) continue;
        const double zeta = (beta - alpha) / (2.0 * gamma);
        const double t =
            std::copysign(1.0, zeta) / (std::fabs(zeta) + std::sqrt(1.0 + zeta * zeta));
        const double c = 1.0 / std::sqrt(1.0 + t * t), s = c * t;
        for (int i = 0; i < m; ++i) {
          const double x = col(w, n, i, p), y = col(w, n, i, q);
          col(w, n, i, p) = c * x - s * y;
          col(w, n, i, q) = s * x + c * y;
        }
        for (int i = 0; i < n; ++i) {
          const double x = col(vv, n, i, p), y = col(vv, n, i, q);
          col(vv, n, i, p) = c * x - s * y;
          col(vv, n, i, q) = s * x + c * y;
        }
      }
    }
    if (off < tol) break;
  }
  // Singular values = column norms; sort descending.
  std::vector<double> norms(static_cast<std::size_t>(n));
  for (int j = 0; j < n; ++j) {
    double ss = 0;
    for (int i = 0; i < m; ++i) ss += col(w, n, i, j) * col(w, n, i, j);
    norms[static_cast<std::size_t>(j)] = std::sqrt(ss);
  }
  std::vector<int> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
    return norms[static_cast<std::size_t>(x)] > norms[static_cast<std::size_t>(y)];
  });

  // Working matrix columns / norm = left vectors of the working orientation; vv = right vectors.
  Svd out;
  out.rows = rows;
  out.cols = cols;
  out.rank = n;
  out.s.resize(static_cast<std::size_t>(n));
  std::vector<double> left(static_cast<std::size_t>(m) * n), right(static_cast<std::size_t>(n) * n);
  for (int k = 0; k < n; ++k) {
    const int j = order[static_cast<std::size_t>(k)];
    const double sv = norms[static_cast<std::size_t>(j)];
    out.s[static_cast<std::size_t>(k)] = sv;
    for (int i = 0; i < m; ++i)
      left[static_cast<std::size_t>(i) * n + k] = sv > 0 ? col(w, n, i, j) / sv : 0.0;
    for (int i = 0; i < n; ++i) right[static_cast<std::size_t>(i) * n + k] = col(vv, n, i, j);
  }
  // A = W V^T... in the working orientation; swap roles back when we transposed.
  if (transposed) {
    out.u = std::move(right);  // [rows = n][rank]
    out.v = std::move(left);   // [cols = m][rank]
  } else {
    out.u = std::move(left);
    out.v = std::move(right);
  }
  return out;
}

}  // namespace kvscope

// One-sided Jacobi SVD: rotate column pairs of a working copy until all columns are orthogonal;
// column norms are then the singular values, normalized columns U, accumulated rotations V.
#include "engine/mla/svd.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kvscope {

namespace {

// Reference into a row-major matrix with `stride` columns.
double& col(std::vector<double>& mat, int stride, int r, int c) {
  return mat[static_cast<std::size_t>(r) * stride + c];
}

// The matrix in the orientation the Jacobi sweeps work on: at least as many rows as columns.
struct Working {
  bool transposed = false;
  int m = 0;               // working rows
  int n = 0;               // working columns (= rank)
  std::vector<double> w;   // [m][n]
  std::vector<double> vv;  // [n][n] accumulated rotations
};

Working make_working(const std::vector<double>& a, int rows, int cols) {
  // Work on the orientation with more rows than columns so the column count is the rank.
  Working k;
  k.transposed = rows < cols;
  k.m = k.transposed ? cols : rows;
  k.n = k.transposed ? rows : cols;
  const int n = k.n;
  k.w.resize(static_cast<std::size_t>(k.m) * n);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      const double x = a[static_cast<std::size_t>(i) * cols + j];
      if (k.transposed)
        k.w[static_cast<std::size_t>(j) * n + i] = x;
      else
        k.w[static_cast<std::size_t>(i) * n + j] = x;
    }
  k.vv.assign(static_cast<std::size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i) k.vv[static_cast<std::size_t>(i) * n + i] = 1.0;
  return k;
}

// Orthogonalizes columns p and q of the working copy (and rotates vv alike); returns their
// correlation before the rotation, or 0 when either column is zero.
double rotate_pair(Working& k, int p, int q, double tol) {
  const int m = k.m, n = k.n;
  std::vector<double>& w = k.w;
  std::vector<double>& vv = k.vv;
  double alpha = 0, beta = 0, gamma = 0;
  for (int i = 0; i < m; ++i) {
    const double x = col(w, n, i, p), y = col(w, n, i, q);
    alpha += x * x;
    beta += y * y;
    gamma += x * y;
  }
  if (alpha == 0.0 || beta == 0.0) return 0.0;
  const double corr = std::fabs(gamma) / std::sqrt(alpha * beta);
  if (corr < tol) return corr;
  const double zeta = (beta - alpha) / (2.0 * gamma);
  const double t = std::copysign(1.0, zeta) / (std::fabs(zeta) + std::sqrt(1.0 + zeta * zeta));
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
  return corr;
}

void jacobi_sweeps(Working& k, double tol, int max_sweeps) {
  for (int sweep = 0; sweep < max_sweeps; ++sweep) {
    double off = 0.0;
    for (int p = 0; p < k.n - 1; ++p)
      for (int q = p + 1; q < k.n; ++q) off = std::max(off, rotate_pair(k, p, q, tol));
    if (off < tol) break;
  }
}

Svd extract(Working& k, int rows, int cols) {
  const int m = k.m, n = k.n;
  std::vector<double>& w = k.w;
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
  for (int kk = 0; kk < n; ++kk) {
    const int j = order[static_cast<std::size_t>(kk)];
    const double sv = norms[static_cast<std::size_t>(j)];
    out.s[static_cast<std::size_t>(kk)] = sv;
    for (int i = 0; i < m; ++i)
      left[static_cast<std::size_t>(i) * n + kk] = sv > 0 ? col(w, n, i, j) / sv : 0.0;
    for (int i = 0; i < n; ++i) right[static_cast<std::size_t>(i) * n + kk] = col(k.vv, n, i, j);
  }
  // A = W V^T... in the working orientation; swap roles back when we transposed.
  if (k.transposed) {
    out.u = std::move(right);  // [rows = n][rank]
    out.v = std::move(left);   // [cols = m][rank]
  } else {
    out.u = std::move(left);
    out.v = std::move(right);
  }
  return out;
}

}  // namespace

Svd svd(const std::vector<double>& a, int rows, int cols, double tol, int max_sweeps) {
  Working k = make_working(a, rows, cols);
  jacobi_sweeps(k, tol, max_sweeps);
  return extract(k, rows, cols);
}

}  // namespace kvscope

// Thin singular value decomposition (one-sided Jacobi, in double precision) for the small
// projection matrices MLA conversion factorizes. A = U diag(S) V^T with S descending.
#pragma once

#include <vector>

namespace kvscope {

struct Svd {
  int rows = 0, cols = 0, rank = 0;  // rank = min(rows, cols)
  std::vector<double> u;             // [rows][rank], orthonormal columns
  std::vector<double> s;             // [rank], descending
  std::vector<double> v;             // [cols][rank], orthonormal columns
};

// `a` is [rows][cols] row-major. Sweeps until off-diagonal correlation < tol (or max_sweeps).
Svd svd(const std::vector<double>& a, int rows, int cols, double tol = 1e-12, int max_sweeps = 60);

}  // namespace kvscope

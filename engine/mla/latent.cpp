// MLA conversion: SVD of [W_k; W_v] per layer.
#include "engine/mla/latent.h"

#include <algorithm>

#include "engine/common/error.h"
#include "engine/mla/mla_codec.h"
#include "engine/mla/svd.h"

namespace kvscope {

MlaConversion convert_to_mla(const Model& model, int rank) {
  std::vector<int> all(static_cast<std::size_t>(model.config().kv_dim()));
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  return convert_to_mla(model, rank, all);
}

MlaConversion convert_to_mla(const Model& model, int rank, const std::vector<int>& key_rows) {
  const ModelConfig& c = model.config();
  const int kv = c.kv_dim(), dim = c.dim;
  const int nk = static_cast<int>(key_rows.size()), rows = nk + kv;
  for (int r : key_rows) {
    if (r < 0 || r >= kv) {
      fail_expected("MLA key rows", "row indices in [0, " + std::to_string(kv) + ")",
                    std::to_string(r));
    }
  }
  MlaConversion out;
  out.full_rank = std::min(rows, dim);
  if (rank < 1 || rank > out.full_rank) {
    fail_expected(std::string(kMlaRank),
                  "an integer in [1, " + std::to_string(out.full_rank) + "] (min(" +
                      std::to_string(nk) + " latent key dims + " + std::to_string(kv) +
                      " value dims, dim " + std::to_string(dim) + ") for this model)",
                  std::to_string(rank));
  }
  out.rank = rank;
  const Weights& w = model.weights();
  for (int l = 0; l < c.n_layers; ++l) {
    std::vector<double> a(static_cast<std::size_t>(rows) * dim);  // [key_rows + kv][dim]
    const float* wk = w.wk + static_cast<long>(l) * kv * dim;
    const float* wv = w.wv + static_cast<long>(l) * kv * dim;
    for (int i = 0; i < nk; ++i) {
      for (int j = 0; j < dim; ++j) {
        a[static_cast<std::size_t>(i) * dim + j] =
            wk[static_cast<std::size_t>(key_rows[static_cast<std::size_t>(i)]) * dim + j];
      }
    }
    for (int i = 0; i < kv * dim; ++i)
      a[static_cast<std::size_t>(nk) * dim + static_cast<std::size_t>(i)] = wv[i];
    Svd d = svd(a, rows, dim);
    MlaLayer layer;
    layer.rank = rank;
    layer.singular_values = d.s;
    layer.w_dkv.resize(static_cast<std::size_t>(rank) * dim);
    layer.w_uk.resize(static_cast<std::size_t>(nk) * rank);
    layer.w_uv.resize(static_cast<std::size_t>(kv) * rank);
    layer.u_t.resize(static_cast<std::size_t>(rank) * rows);
    for (int r = 0; r < rank; ++r) {
      for (int j = 0; j < dim; ++j) {
        layer.w_dkv[static_cast<std::size_t>(r) * dim + j] = static_cast<float>(
            d.s[static_cast<std::size_t>(r)] * d.v[static_cast<std::size_t>(j) * d.rank + r]);
      }
      for (int i = 0; i < rows; ++i) {
        const double u = d.u[static_cast<std::size_t>(i) * d.rank + r];
        layer.u_t[static_cast<std::size_t>(r) * rows + i] = static_cast<float>(u);
        if (i < nk)
          layer.w_uk[static_cast<std::size_t>(i) * rank + r] = static_cast<float>(u);
        else
          layer.w_uv[static_cast<std::size_t>(i - nk) * rank + r] = static_cast<float>(u);
      }
    }
    double total = 0, kept = 0;
    for (int r = 0; r < d.rank; ++r) {
      const double e = d.s[static_cast<std::size_t>(r)] * d.s[static_cast<std::size_t>(r)];
      total += e;
      if (r < rank) kept += e;
    }
    out.energy_kept.push_back(total > 0 ? kept / total : 1.0);
    out.layers.push_back(std::move(layer));
  }
  return out;
}

}  // namespace kvscope

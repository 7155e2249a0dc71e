// MLA conversion of a loaded model: per layer, the joint low-rank factorization of the stacked
// key and value projections [W_k; W_v] (2*kv_dim x dim) = U S V^T, truncated to rank r:
//   W_dkv = S_r V_r^T  (r x dim)      down-projection: the cached latent c_t = W_dkv x_t
//   W_uk  = U_r[:kv_dim]  (kv_dim x r) up-projection to keys (before RoPE)
//   W_uv  = U_r[kv_dim:]  (kv_dim x r) up-projection to values
// Because [k; v] = [W_k; W_v] x, the latent can equally be computed from the pre-RoPE key and
// the value: c_t = U_r^T [k_t; v_t]. At full rank r = min(2*kv_dim, dim) this is exact.
#pragma once

#include <vector>

#include "engine/model/checkpoint.h"

namespace kvscope {

struct MlaLayer {
  int rank = 0;
  std::vector<float> w_dkv;  // [rank][dim]
  std::vector<float> w_uk;   // [kv_dim][rank]
  std::vector<float> w_uv;   // [kv_dim][rank]
  std::vector<float> u_t;    // [rank][2*kv_dim]  latent from [k; v]: c = u_t * [k; v]
  std::vector<double> singular_values;  // [min(2*kv_dim, dim)] all of them, descending
};

struct MlaConversion {
  int rank = 0;
  int full_rank = 0;  // min(2*kv_dim, dim)
  std::vector<MlaLayer> layers;
  // Fraction of the squared Frobenius norm of [W_k; W_v] kept at this rank, per layer.
  std::vector<double> energy_kept;
};

// Factorizes every layer of `model`; throws kvscope::Error when rank is outside [1, full rank].
MlaConversion convert_to_mla(const Model& model, int rank);

}  // namespace kvscope

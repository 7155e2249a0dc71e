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

// With a subset of key rows (mode B keeps some key dims out of the latent, see mla_codec.h) the
// factorized matrix is [W_k[key_rows]; W_v] and key_rows takes the place of kv_dim for keys.
struct MlaLayer {
  int rank = 0;
  std::vector<float> w_dkv;  // [rank][dim]
  std::vector<float> w_uk;   // [key_rows][rank]
  std::vector<float> w_uv;   // [kv_dim][rank]
  std::vector<float> u_t;    // [rank][key_rows + kv_dim]  latent from [k; v]: c = u_t * [k; v]
  std::vector<double> singular_values;  // [min(key_rows + kv_dim, dim)] all of them, descending
};

struct MlaConversion {
  int rank = 0;
  int full_rank = 0;  // min(key_rows + kv_dim, dim)
  std::vector<MlaLayer> layers;
  // Fraction of the squared Frobenius norm of [W_k; W_v] kept at this rank, per layer.
  std::vector<double> energy_kept;
};

// Factorizes every layer of `model`; throws kvscope::Error when rank is outside [1, full rank].
MlaConversion convert_to_mla(const Model& model, int rank);
// The same over [W_k[key_rows]; W_v]: key_rows are row indices of W_k in [0, kv_dim), ascending
// or not (their order is the order of w_uk's rows and of the keys fed to u_t). Empty key_rows
// factorizes W_v alone.
MlaConversion convert_to_mla(const Model& model, int rank, const std::vector<int>& key_rows);

}  // namespace kvscope

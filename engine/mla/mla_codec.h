// MlaCodec: what the latent KV cache needs at run time to turn a token's K/V into one latent row
// per layer and to attend over latents. Built from the real model by SVD (engine/mla/latent.h).
//   Mode A (reconstruct): c = U_r^T [k_preRoPE; v]; attention rebuilds k = W_uk c, applies RoPE at
//     the slot's position, and v = W_uv c. Exact at full rank.
//   Mode B (absorbed, DeepSeek style): rope_dims dims of every KV head keep RoPE and are cached
//     post-RoPE beside the latent; the other ("nope") dims lose rotation and go into the latent
//     with v: c = U_r^T [k_nope; v]. Scores are (W_uk_g^T q_nope) . c + q_rope . k_rope, the output
//     W_uv_g (sum_t a_t c_t): attention runs on latents and never rebuilds a token's K or V.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/kv/kv_storage.h"
#include "engine/model/checkpoint.h"

namespace kvscope {

enum class MlaMode { kReconstruct, kAbsorbed };  // mode A, mode B

// Which rotary dims mode B keeps per KV head (in pairs, as RoPE rotates adjacent pairs).
enum class RopeSelect {
  kHighFrequency,  // the lowest pair indices: the fastest-rotating pairs (MHA2MLA's S_high)
  kWeightNorm,     // per KV head, the pairs with the largest ||W_q pair|| x ||W_k pair|| (a
                   // data-free stand-in for MHA2MLA's 2-norm criterion on activations)
};

struct MlaOptions {
  MlaMode mode = MlaMode::kReconstruct;
  int rank = 0;       // latent values per token per layer
  int rope_dims = 0;  // mode B: rotary dims kept per KV head (even, 0..head_dim)
  RopeSelect rope_select = RopeSelect::kHighFrequency;
};

struct MlaCodecLayer {
  std::vector<float> u_t;   // [rank][key_rows + kv_dim]: c = u_t [k_latent_dims; v]
  std::vector<float> w_uk;  // [kv_heads * nope_dims][rank]: latent -> keys (nope dims, pre-RoPE)
  std::vector<float> w_uv;  // [kv_dim][rank]: latent -> values
};

struct MlaCodec {
  // Unique within the process for each conversion (make_mla_codec), never reused: a backend that
  // keeps a device copy of the matrices keys it by this (an address can be reused by the next).
  std::uint64_t id = 0;
  MlaOptions options;
  int n_layers = 0;
  int n_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  float rope_theta = 10000.0f;
  int nope_dims = 0;  // key dims per KV head carried by the latent (head_dim in mode A)
  int full_rank = 0;  // min(kv_heads * nope_dims + kv_dim, dim)
  // Head-dim indices per KV head: rotary dims cached as post-RoPE keys (mode B) and latent dims.
  std::vector<int> rope_index;  // [kv_heads][rope_dims]
  std::vector<int> nope_index;  // [kv_heads][nope_dims]
  std::vector<MlaCodecLayer> layers;
  std::vector<double> energy_kept;  // [n_layers] fraction of ||[W_k_nope; W_v]||_F^2 kept

  int rank() const { return options.rank; }
  int rope_dims() const { return options.rope_dims; }
  int key_rows() const { return kv_heads * nope_dims; }
  int rope_heads() const { return options.rope_dims > 0 ? kv_heads : 0; }
  // "MLA-A r32", "MLA-B r24 rope2 high-freq"
  std::string name() const;
};

// The settings validate() names in its errors (their where()), in the engine's words; a caller
// that knows which flag or JSON key carried one puts that in its place (setting_source.h).
inline constexpr std::string_view kMlaRank = "MLA rank";
inline constexpr std::string_view kMlaRopeDims = "MLA RoPE dims";

// What converting a model of shape `model` needs of `options`, checked in this one place (the
// conversion, the scenario loader and the CLI call it): rope dims 0 in mode A, even and in [0,
// head_dim] in mode B, and a rank in [1, mla_full_rank]. Needs only the shape, so a scenario is
// checked before any weights load. Throws kvscope::Error located at kMlaRank or kMlaRopeDims.
void validate(const MlaOptions& options, const ModelConfig& model);

// Converts `model` (SVD per layer) after validate(options, its shape).
MlaCodec make_mla_codec(const Model& model, const MlaOptions& options);
// Full rank for the given mode and rope dims: min(kv_heads * (head_dim - rope_dims) + kv_dim, dim).
int mla_full_rank(const ModelConfig& model, int rope_dims);
// The ranks a sweep evaluates for `rope_dims` (0: mode A): full rank x k / 8 for k = 1..8, at
// least 1, ascending, a rank that repeats (full rank below 8) listed once. `kvscope eval
// --mla-sweep` runs it for every series and the Quality panel for mode A; both read it here.
std::vector<int> mla_sweep_ranks(const ModelConfig& model, int rope_dims);

// A pool layout holding `codec`'s latents (and mode B's RoPE keys), both in `format`.
KvLayout mla_layout_for(const ModelConfig& model, const MlaCodec& codec, int block_size,
                        int num_blocks, const KvFormat& format);
// The same from the options alone (no weights: byte accounting before the SVD runs).
KvLayout mla_layout_for(const ModelConfig& model, const MlaOptions& options, int block_size,
                        int num_blocks, const KvFormat& format);

// RopeSelect::kWeightNorm's score of each RoPE pair p (dims 2p, 2p + 1) of KV head `kv_head` in
// `layer`: ||W_k pair|| x ||W_q pair|| (Frobenius norms of the pair's two rows) for each query
// head of the GQA group, added to score[p] ([head_dim / 2]) one head at a time. MLA adds every
// layer's into one score; sparse attention's proxy indexer (engine/sparse) ranks each layer's.
void add_rope_pair_norms(const ModelConfig& c, const Weights& w, int layer, int kv_head,
                         std::vector<double>& score);

// Parses "a" / "b" (--mla-mode) and "high-freq" / "norm" (--mla-rope-select).
MlaMode parse_mla_mode(const std::string& text, const std::string& where);
RopeSelect parse_rope_select(const std::string& text, const std::string& where);

}  // namespace kvscope

// Building an MlaCodec from the real model: pick mode B's rotary dims, factorize, keep the
// matrices the latent cache needs.
#include "engine/mla/mla_codec.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>

#include "engine/common/error.h"
#include "engine/mla/latent.h"

namespace kvscope {
namespace {

// The pairs (by first dim) each KV head keeps rotary: [kv_heads][rope_dims / 2].
std::vector<std::vector<int>> pick_rope_pairs(const Model& model, const MlaOptions& o) {
  const ModelConfig& c = model.config();
  const int hd = c.head_dim(), pairs = hd / 2, keep = o.rope_dims / 2;
  std::vector<std::vector<int>> out(static_cast<std::size_t>(c.n_kv_heads));
  for (int g = 0; g < c.n_kv_heads; ++g) {
    std::vector<int> order(static_cast<std::size_t>(pairs));
    std::iota(order.begin(), order.end(), 0);
    if (o.rope_select == RopeSelect::kWeightNorm) {
      std::vector<double> score(static_cast<std::size_t>(pairs), 0.0);
      const Weights& w = model.weights();
      for (int l = 0; l < c.n_layers; ++l) add_rope_pair_norms(c, w, l, g, score);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        return score[static_cast<std::size_t>(a)] > score[static_cast<std::size_t>(b)];
      });
    }
    order.resize(static_cast<std::size_t>(keep));
    std::sort(order.begin(), order.end());
    out[static_cast<std::size_t>(g)] = order;
  }
  return out;
}

}  // namespace

void add_rope_pair_norms(const ModelConfig& c, const Weights& w, int layer, int kv_head,
                         std::vector<double>& score) {
  const int hd = c.head_dim();
  // Frobenius norm of rows [row, row + 2) of a [rows][dim] matrix.
  auto pair_norm = [&](const float* m, long row) {
    double s = 0.0;
    for (long r = row; r < row + 2; ++r) {
      for (int j = 0; j < c.dim; ++j) {
        const double x = m[r * c.dim + j];
        s += x * x;
      }
    }
    return std::sqrt(s);
  };
  const float* wq = w.wq + static_cast<long>(layer) * c.q_dim() * c.dim;
  const float* wk = w.wk + static_cast<long>(layer) * c.kv_dim() * c.dim;
  for (int p = 0; p < hd / 2; ++p) {
    const double k = pair_norm(wk, static_cast<long>(kv_head) * hd + 2 * p);
    for (int h = kv_head * c.gqa_group(); h < (kv_head + 1) * c.gqa_group(); ++h)
      score[static_cast<std::size_t>(p)] += k * pair_norm(wq, static_cast<long>(h) * hd + 2 * p);
  }
}

int mla_full_rank(const ModelConfig& model, int rope_dims) {
  return std::min(model.n_kv_heads * (model.head_dim() - rope_dims) + model.kv_dim(), model.dim);
}

std::vector<int> mla_sweep_ranks(const ModelConfig& model, int rope_dims) {
  // Eighths of the full rank: even steps in bytes per token (the latent row is rank values), so
  // the sweep's points spread evenly along the memory axis from 1/8 of the cache to all of it.
  const int full = mla_full_rank(model, rope_dims);
  std::vector<int> ranks;
  for (int k = 1; k <= 8; ++k) {
    const int rank = std::max(1, full * k / 8);
    if (ranks.empty() || ranks.back() != rank) ranks.push_back(rank);
  }
  return ranks;
}

std::string MlaCodec::name() const {
  if (options.mode == MlaMode::kReconstruct) return "MLA-A r" + std::to_string(options.rank);
  return "MLA-B r" + std::to_string(options.rank) + " rope" + std::to_string(options.rope_dims) +
         (options.rope_dims == 0 || options.rope_dims == head_dim ? ""
          : options.rope_select == RopeSelect::kHighFrequency     ? " high-freq"
                                                                  : " norm");
}

void validate(const MlaOptions& o, const ModelConfig& c) {
  const int hd = c.head_dim();
  if (o.mode == MlaMode::kReconstruct && o.rope_dims != 0) {
    fail_expected(std::string(kMlaRopeDims),
                  "0 in mode a (mode a re-applies RoPE to every key dim)",
                  std::to_string(o.rope_dims));
  }
  if (o.rope_dims < 0 || o.rope_dims > hd || o.rope_dims % 2 != 0) {
    fail_expected(std::string(kMlaRopeDims),
                  "an even number in [0, " + std::to_string(hd) + "] (rotary dims per KV head)",
                  std::to_string(o.rope_dims));
  }
  const int key_dims = c.n_kv_heads * (hd - o.rope_dims);
  const int full = mla_full_rank(c, o.rope_dims);
  if (o.rank < 1 || o.rank > full) {
    fail_expected(std::string(kMlaRank),
                  "an integer in [1, " + std::to_string(full) + "] (min(" +
                      std::to_string(key_dims) + " latent key dims + " +
                      std::to_string(c.kv_dim()) + " value dims, dim " + std::to_string(c.dim) +
                      ") for this model)",
                  std::to_string(o.rank));
  }
}

MlaCodec make_mla_codec(const Model& model, const MlaOptions& o) {
  const ModelConfig& c = model.config();
  const int hd = c.head_dim();
  validate(o, c);
  static std::atomic<std::uint64_t> next_id{1};
  MlaCodec codec;
  codec.id = next_id++;
  codec.options = o;
  codec.n_layers = c.n_layers;
  codec.n_heads = c.n_heads;
  codec.kv_heads = c.n_kv_heads;
  codec.head_dim = hd;
  codec.rope_theta = c.rope_theta;
  codec.nope_dims = hd - o.rope_dims;
  const auto pairs = pick_rope_pairs(model, o);
  std::vector<int> key_rows;  // W_k rows the latent carries, KV head by KV head
  for (int g = 0; g < c.n_kv_heads; ++g) {
    std::vector<std::uint8_t> is_rope(static_cast<std::size_t>(hd), 0);
    for (int p : pairs[static_cast<std::size_t>(g)]) {
      is_rope[static_cast<std::size_t>(2 * p)] = is_rope[static_cast<std::size_t>(2 * p + 1)] = 1;
    }
    for (int i = 0; i < hd; ++i) {
      if (is_rope[static_cast<std::size_t>(i)] != 0) {
        codec.rope_index.push_back(i);
      } else {
        codec.nope_index.push_back(i);
        key_rows.push_back(g * hd + i);
      }
    }
  }
  MlaConversion conv = convert_to_mla(model, o.rank, key_rows);
  codec.full_rank = conv.full_rank;
  codec.energy_kept = conv.energy_kept;
  for (MlaLayer& l : conv.layers) {
    codec.layers.push_back({std::move(l.u_t), std::move(l.w_uk), std::move(l.w_uv)});
  }
  return codec;
}

KvLayout mla_layout_for(const ModelConfig& model, const MlaCodec& codec, int block_size,
                        int num_blocks, const KvFormat& format) {
  return mla_layout_for(model, codec.options, block_size, num_blocks, format);
}

KvLayout mla_layout_for(const ModelConfig& model, const MlaOptions& options, int block_size,
                        int num_blocks, const KvFormat& format) {
  KvLayout layout = kv_layout_for(model, block_size, num_blocks, format, format);
  layout.latent_dim = options.rank;
  layout.rope_heads = options.rope_dims > 0 ? model.n_kv_heads : 0;
  layout.rope_dim = options.rope_dims;
  return layout;
}

MlaMode parse_mla_mode(const std::string& text, const std::string& where) {
  if (text == "a" || text == "A") return MlaMode::kReconstruct;
  if (text == "b" || text == "B") return MlaMode::kAbsorbed;
  fail_expected(where, "a (reconstruct K/V from latents) or b (absorbed, decoupled RoPE)",
                "'" + text + "'");
}

RopeSelect parse_rope_select(const std::string& text, const std::string& where) {
  if (text == "high-freq") return RopeSelect::kHighFrequency;
  if (text == "norm") return RopeSelect::kWeightNorm;
  fail_expected(where, "high-freq or norm", "'" + text + "'");
}

}  // namespace kvscope

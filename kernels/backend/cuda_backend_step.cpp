// run_step on the CUDA backend (cuda_backend_impl.h): the whole engine step on the device, layer
// by layer, with the same kernels and GEMMs as the op-level methods, in the same order. Only the
// embeddings, positions, block tables and live maps go up; the wanted logits (or greedy tokens)
// and captured attention rows come back.
#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "engine/common/error.h"
#include "kernels/backend/cuda_backend_impl.h"

namespace kvscope {

// One step's shapes and device rows ([tokens][width] each, in step_ buffers), and what every
// layer reads of its metadata.
struct CudaBackend::Step {
  Step(const Model& model, int tokens)
      : c(model.config()),
        w(model.weights()),
        nw(model.native()),
        m(tokens),
        dim(c.dim),
        q_dim(c.q_dim()),
        kv_dim(c.kv_dim()),
        hidden(c.hidden_dim),
        shape{c.n_heads, c.n_kv_heads, c.head_dim()} {}

  const ModelConfig& c;
  const Weights& w;
  const NativeWeights* nw;  // the model's quantized matrices, or nullptr
  int m;                    // tokens
  long dim, q_dim, kv_dim, hidden;
  AttentionShape shape;
  // Device memory: the residual stream, a norm's output, Q, K, V, attention's output, the FFN's
  // hidden pair.
  float *x = nullptr, *xn = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *att = nullptr,
        *hb = nullptr, *hb2 = nullptr;
  const int* pos = nullptr;             // device [m]: RoPE positions
  const int* tables = nullptr;          // device: the step's block tables (stage_tables)
  std::vector<AttentionQuery> queries;  // one per token; q and out unset (device rows instead)
};

void CudaBackend::run_step(const Model& model, std::span<const StepToken> tokens,
                           std::span<float> logits, std::span<int> greedy) {
  guard([&] { step_on_device(model, tokens, logits, greedy); });
}

void CudaBackend::step_on_device(const Model& model, std::span<const StepToken> tokens,
                                 std::span<float> logits, std::span<int> greedy) {
  if (tokens.empty()) return;
  Step s(model, static_cast<int>(tokens.size()));
  upload_step_inputs(s, tokens);
  for (int l = 0; l < s.c.n_layers; ++l) {
    attention_block(s, l, tokens);
    ffn_block(s, l);
  }
  step_logits(s, tokens, logits, greedy);
}

// The step's activation rows on the device, then its token embeddings and positions up (the
// embedding table stays on the host: a row per token) and its block tables, staged once for
// every layer's K/V writes (and found already there by the attention batch, which stages the
// same tables).
void CudaBackend::upload_step_inputs(Step& s, std::span<const StepToken> tokens) {
  const auto rows = [&](long width) { return static_cast<std::size_t>(s.m * width) * 4; };
  StepBuffers& b = step_;
  s.x = scratch(b.x, rows(s.dim)).as<float>();
  s.xn = scratch(b.xn, rows(s.dim)).as<float>();
  s.q = scratch(b.q, rows(s.q_dim)).as<float>();
  s.k = scratch(b.k, rows(s.kv_dim)).as<float>();
  s.v = scratch(b.v, rows(s.kv_dim)).as<float>();
  s.att = scratch(b.att, rows(s.q_dim)).as<float>();
  s.hb = scratch(b.hb, rows(s.hidden)).as<float>();
  s.hb2 = scratch(b.hb2, rows(s.hidden)).as<float>();

  embed_host_.resize(static_cast<std::size_t>(s.m * s.dim));
  pos_host_.resize(static_cast<std::size_t>(s.m));
  s.queries.reserve(tokens.size());
  for (int t = 0; t < s.m; ++t) {
    const StepToken& tok = tokens[static_cast<std::size_t>(t)];
    std::copy_n(s.w.token_embedding + tok.token * s.dim, s.dim, embed_host_.begin() + t * s.dim);
    pos_host_[static_cast<std::size_t>(t)] = tok.pos;
    s.queries.push_back({tok.view, nullptr, nullptr, tok.pos, tok.observer});
  }
  ops_->to_device(s.x, embed_host_.data(), rows(s.dim));
  s.pos = stage(b.pos, pos_host_.data(), pos_host_.size());
  s.tables = stage_tables(s.queries, table_at_);
}

const float* CudaBackend::dense(const Step& s, const float* rows,
                                std::vector<QuantMatrix> NativeWeights::*which, int l) const {
  // The device has no quantized GEMM yet: refused, as matmul_batch refuses it.
  if (s.nw != nullptr && (s.nw->*which)[static_cast<std::size_t>(l)].data != nullptr)
    refuse_quantized();
  return rows;
}

const float* CudaBackend::norm_weights(const Step& s, const float* host) {
  return static_cast<const float*>(weight(host, static_cast<std::size_t>(s.dim), GemmType::kF32));
}

// Layer l's attention block: pre-norm, Q/K/V, RoPE, K/V into the pool, attention, output
// projection added to the residual by the GEMM itself.
void CudaBackend::attention_block(const Step& s, int l, std::span<const StepToken> tokens) {
  const ModelConfig& c = s.c;
  const Weights& w = s.w;
  const long dim = s.dim, q_dim = s.q_dim, kv_dim = s.kv_dim;
  const int m = s.m;
  ops_->rmsnorm(s.xn, s.x, norm_weights(s, w.rms_att + l * dim), m, c.dim, c.rms_eps);
  const void* in = gemm_input(s.xn, static_cast<std::size_t>(m * dim));
  gemm(s.q, in, dense(s, w.wq + l * q_dim * dim, &NativeWeights::wq, l), m, c.dim, c.q_dim(),
       false);
  gemm(s.k, in, dense(s, w.wk + l * kv_dim * dim, &NativeWeights::wk, l), m, c.dim, c.kv_dim(),
       false);
  gemm(s.v, in, dense(s, w.wv + l * kv_dim * dim, &NativeWeights::wv, l), m, c.dim, c.kv_dim(),
       false);
  ops_->rope(s.q, s.k, s.pos, m, c.q_dim(), c.kv_dim(), c.head_dim(), c.rope_theta);
  for (int t = 0; t < m; ++t) {
    const KvSeqView& view = tokens[static_cast<std::size_t>(t)].view;
    kv_write_on_device(view, l, s.tables + table_at_[static_cast<std::size_t>(t)], s.k + t * kv_dim,
                       s.v + t * kv_dim);
  }
  attention_on_device(l, s.shape, s.queries, s.q, s.att);
  gemm(s.x, gemm_input(s.att, static_cast<std::size_t>(m * q_dim)),
       dense(s, w.wo + l * dim * q_dim, &NativeWeights::wo, l), m, c.q_dim(), c.dim, true);
}

// Layer l's FFN block: pre-norm, gate and up, SwiGLU, down projection added to the residual.
void CudaBackend::ffn_block(const Step& s, int l) {
  const ModelConfig& c = s.c;
  const Weights& w = s.w;
  const long dim = s.dim, hidden = s.hidden;
  const int m = s.m;
  ops_->rmsnorm(s.xn, s.x, norm_weights(s, w.rms_ffn + l * dim), m, c.dim, c.rms_eps);
  const void* in = gemm_input(s.xn, static_cast<std::size_t>(m * dim));
  gemm(s.hb, in, dense(s, w.w1 + l * hidden * dim, &NativeWeights::w1, l), m, c.dim, c.hidden_dim,
       false);
  gemm(s.hb2, in, dense(s, w.w3 + l * hidden * dim, &NativeWeights::w3, l), m, c.dim, c.hidden_dim,
       false);
  ops_->swiglu(s.hb, s.hb2, m * hidden);
  gemm(s.x, gemm_input(s.hb, static_cast<std::size_t>(m * hidden)),
       dense(s, w.w2 + l * dim * hidden, &NativeWeights::w2, l), m, c.hidden_dim, c.dim, true);
}

// Final norm and classifier for the wanted tokens only: their rows gathered (all of them, in a
// prefill chunk that wants only its last, is one row), normed, multiplied, read back; with greedy
// sampling the argmax runs on the device and one int per token comes back.
void CudaBackend::step_logits(const Step& s, std::span<const StepToken> tokens,
                              std::span<float> logits, std::span<int> greedy) {
  const ModelConfig& c = s.c;
  const long dim = s.dim;
  int wanted = 0;
  for (int t = 0; t < s.m; ++t) {
    if (!tokens[static_cast<std::size_t>(t)].want_logits) continue;
    if (wanted != t)
      ops_->copy_on_device(s.x + wanted * dim, s.x + t * dim, static_cast<std::size_t>(dim) * 4);
    ++wanted;
  }
  if (wanted == 0) return;
  if (s.nw != nullptr && s.nw->wcls.data != nullptr) refuse_quantized();
  ops_->rmsnorm(s.xn, s.x, norm_weights(s, s.w.rms_final), wanted, c.dim, c.rms_eps);
  const std::size_t logit_floats = static_cast<std::size_t>(wanted) * c.vocab_size;
  if ((!logits.empty() && logits.size() != logit_floats) ||
      (!greedy.empty() && greedy.size() != static_cast<std::size_t>(wanted))) {
    throw InternalError(flag_, "the step's logits or greedy span does not hold its wanted rows");
  }
  float* dl = scratch(step_.logits, logit_floats * 4).as<float>();
  gemm(dl, gemm_input(s.xn, static_cast<std::size_t>(wanted * dim)), s.w.wcls, wanted, c.dim,
       c.vocab_size, false);
  if (!logits.empty()) ops_->to_host(logits.data(), dl, logit_floats * 4);
  if (greedy.empty()) return;
  int* dg = scratch(step_.greedy, greedy.size() * sizeof(int)).as<int>();
  ops_->argmax(dg, dl, wanted, c.vocab_size);
  ops_->to_host(greedy.data(), dg, greedy.size() * sizeof(int));
}

}  // namespace kvscope

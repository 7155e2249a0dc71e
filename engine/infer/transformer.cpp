// The forward pass, top to bottom as in the Llama paper: embed, then per layer attention and
// SwiGLU FFN with pre-RMSNorm and residuals, then the final norm and the classifier.
#include "engine/infer/transformer.h"

#include <algorithm>
#include <cstring>

#include "engine/common/error.h"

namespace kvscope {

Transformer::Transformer(std::shared_ptr<const Model> model, Backend& backend)
    : model_(std::move(model)), backend_(backend) {
  const ModelConfig& c = model_->config();
  x_.resize(static_cast<std::size_t>(c.dim));
  xb_.resize(static_cast<std::size_t>(std::max(c.dim, c.q_dim())));
  xb2_.resize(static_cast<std::size_t>(c.dim));
  q_.resize(static_cast<std::size_t>(c.q_dim()));
  k_.resize(static_cast<std::size_t>(c.kv_dim()));
  v_.resize(static_cast<std::size_t>(c.kv_dim()));
  hb_.resize(static_cast<std::size_t>(c.hidden_dim));
  hb2_.resize(static_cast<std::size_t>(c.hidden_dim));
  logits_.resize(static_cast<std::size_t>(c.vocab_size));
}

std::span<float> Transformer::forward(int token, int pos, const KvSeqView& kv,
                                      AttentionObserver* observer) {
  const ModelConfig& c = model_->config();
  const Weights& w = model_->weights();
  const long dim = c.dim, kv_dim = c.kv_dim(), q_dim = c.q_dim(), hidden = c.hidden_dim;
  if (token < 0 || token >= c.vocab_size) {
    fail_expected("forward: token", "an id in [0, " + std::to_string(c.vocab_size) + ")",
                  std::to_string(token));
  }
  const AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim()};

  // Token embedding.
  std::memcpy(x_.data(), w.token_embedding + token * dim, static_cast<std::size_t>(dim) * 4);

  for (int l = 0; l < c.n_layers; ++l) {
    // Attention block: pre-norm.
    backend_.rmsnorm(xb_.data(), x_.data(), w.rms_att + l * dim, c.dim, c.rms_eps);
    // Q, K, V projections.
    const MatmulOut qkv[] = {{q_.data(), w.wq + l * q_dim * dim, c.q_dim()},
                             {k_.data(), w.wk + l * kv_dim * dim, c.kv_dim()},
                             {v_.data(), w.wv + l * kv_dim * dim, c.kv_dim()}};
    backend_.matmul_shared_input(xb_.data(), c.dim, qkv);
    // RoPE on q and k at this token's position.
    backend_.rope(q_.data(), k_.data(), pos, c.q_dim(), c.kv_dim(), c.head_dim(), c.rope_theta);
    // Store k, v in the cache (the view decides block, slot and format).
    backend_.kv_write(kv, l, k_.data(), v_.data());
    // softmax(q K^T / sqrt(d)) V over every cached slot of this sequence.
    backend_.paged_attention(kv, l, shape, q_.data(), xb_.data(), pos, observer);
    // Output projection and residual.
    backend_.matmul(xb2_.data(), xb_.data(), w.wo + l * dim * q_dim, c.q_dim(), c.dim);
    for (long i = 0; i < dim; ++i)
      x_[static_cast<std::size_t>(i)] += xb2_[static_cast<std::size_t>(i)];

    // FFN block: pre-norm, SwiGLU, down projection, residual.
    backend_.rmsnorm(xb_.data(), x_.data(), w.rms_ffn + l * dim, c.dim, c.rms_eps);
    const MatmulOut gate_up[] = {{hb_.data(), w.w1 + l * hidden * dim, c.hidden_dim},
                                 {hb2_.data(), w.w3 + l * hidden * dim, c.hidden_dim}};
    backend_.matmul_shared_input(xb_.data(), c.dim, gate_up);
    backend_.swiglu(hb_.data(), hb2_.data(), c.hidden_dim);
    backend_.matmul(xb2_.data(), hb_.data(), w.w2 + l * dim * hidden, c.hidden_dim, c.dim);
    for (long i = 0; i < dim; ++i)
      x_[static_cast<std::size_t>(i)] += xb2_[static_cast<std::size_t>(i)];
  }

  // Final norm and classifier.
  backend_.rmsnorm(x_.data(), x_.data(), w.rms_final, c.dim, c.rms_eps);
  backend_.matmul(logits_.data(), x_.data(), w.wcls, c.dim, c.vocab_size);
  return logits_;
}

}  // namespace kvscope

// The forward pass, top to bottom as in the Llama paper: embed, then per layer attention and
// SwiGLU FFN with pre-RMSNorm and residuals, then the final norm and the classifier; over all the
// tokens of one engine step at once.
#include "engine/infer/transformer.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "engine/common/error.h"
#include "engine/model/sampler.h"

namespace kvscope {
namespace {

std::size_t sz(long v) {
  return static_cast<std::size_t>(v);
}

}  // namespace

Transformer::Transformer(std::shared_ptr<const Model> model, Backend& backend)
    : model_(std::move(model)), backend_(backend) {
  reserve(1, 1);
}

void Transformer::reserve(std::size_t tokens, std::size_t logit_rows) {
  const ModelConfig& c = model_->config();
  if (tokens > capacity_) {
    capacity_ = tokens;
    x_.resize(tokens * sz(c.dim));
    xn_.resize(tokens * sz(c.dim));
    q_.resize(tokens * sz(c.q_dim()));
    k_.resize(tokens * sz(c.kv_dim()));
    v_.resize(tokens * sz(c.kv_dim()));
    att_.resize(tokens * sz(c.q_dim()));
    proj_.resize(tokens * sz(c.dim));
    hb_.resize(tokens * sz(c.hidden_dim));
    hb2_.resize(tokens * sz(c.hidden_dim));
  }
  if (logit_rows > logit_capacity_) {
    logit_capacity_ = logit_rows;
    last_.resize(logit_rows * sz(c.dim));
    logits_.resize(logit_rows * sz(c.vocab_size));
  }
}

std::span<float> Transformer::forward(int token, int pos, const KvSeqView& kv,
                                      AttentionObserver* observer) {
  const StepToken one{token, pos, kv, true, observer};
  return forward_step(std::span<const StepToken>(&one, 1));
}

namespace {

// KIVI quantizes a group of keys when its last token is written and then drops the group's
// full-precision staging, which earlier tokens of the same group still attend through: within a
// KIVI pool a sequence's tokens must each be written and attended before the next is written.
bool writes_change_earlier_slots(const KvSeqView& v) {
  const KvLayout& l = v.storage->layout();
  return l.k_format.is_kivi() || l.v_format.is_kivi();
}

}  // namespace

int Transformer::sub_steps(std::span<const StepToken> tokens, std::vector<int>& group) const {
  bool ordered = false;
  for (const StepToken& t : tokens) ordered = ordered || writes_change_earlier_slots(t.view);
  group.assign(tokens.size(), 0);
  if (ordered) {
    // Wave k: the k-th token of every sequence (a sequence is a block table).
    int groups = 1;
    std::unordered_map<const BlockId*, int> seen;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      group[i] = seen[tokens[i].view.blocks.data()]++;
      groups = std::max(groups, group[i] + 1);
    }
    return groups;
  }
  // At most kMaxStepTokens per sub-step bounds the activations (about 25 KB per token for
  // SmolLM2); a later sub-step only reads slots the earlier ones wrote.
  for (std::size_t i = 0; i < tokens.size(); ++i) group[i] = static_cast<int>(i / kMaxStepTokens);
  return std::max(1, static_cast<int>((tokens.size() + kMaxStepTokens - 1) / kMaxStepTokens));
}

std::size_t Transformer::check_step(std::span<const StepToken> tokens) const {
  const int vocab = model_->config().vocab_size;
  std::size_t wanted = 0;
  for (const StepToken& t : tokens) {
    if (t.token < 0 || t.token >= vocab) {
      fail_expected("forward: token", "an id in [0, " + std::to_string(vocab) + ")",
                    std::to_string(t.token));
    }
    wanted += t.want_logits ? 1 : 0;
  }
  return wanted;
}

std::span<const int> Transformer::greedy_step(std::span<const StepToken> tokens) {
  std::vector<int> group;
  if (sub_steps(tokens, group) == 1) {
    greedy_.resize(check_step(tokens));
    if (backend_.run_step(*model_, tokens, {}, greedy_)) return greedy_;
  }
  const std::span<const float> logits = forward_step(tokens);
  const auto vocab = static_cast<std::size_t>(model_->config().vocab_size);
  greedy_.resize(logits.size() / vocab);
  for (std::size_t k = 0; k < greedy_.size(); ++k)
    greedy_[k] = argmax(logits.subspan(k * vocab, vocab));
  return greedy_;
}

std::span<float> Transformer::forward_step(std::span<const StepToken> tokens) {
  // group[i]: the sub-step token i runs in; sub-steps run one after the other.
  std::vector<int> group;
  const int groups = sub_steps(tokens, group);
  if (groups == 1) return run_step(tokens);
  // One sub-step per group; the logits of wanted tokens go back in the step's order.
  const auto vocab = static_cast<std::size_t>(model_->config().vocab_size);
  std::vector<std::size_t> row(tokens.size(), 0);
  std::size_t wanted = 0;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    row[i] = wanted;
    wanted += tokens[i].want_logits ? 1 : 0;
  }
  std::vector<float> out(wanted * vocab);
  std::vector<StepToken> sub;
  for (int g = 0; g < groups; ++g) {
    sub.clear();
    for (std::size_t i = 0; i < tokens.size(); ++i)
      if (group[i] == g) sub.push_back(tokens[i]);
    const std::span<const float> got = run_step(sub);
    std::size_t k = 0;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (group[i] != g || !tokens[i].want_logits) continue;
      std::copy_n(got.begin() + static_cast<std::ptrdiff_t>(k++ * vocab), vocab,
                  out.begin() + static_cast<std::ptrdiff_t>(row[i] * vocab));
    }
  }
  reserve(0, wanted);  // logit rows only: the activations stay at the largest sub-step
  std::copy(out.begin(), out.end(), logits_.begin());
  return std::span<float>(logits_.data(), out.size());
}

std::span<float> Transformer::run_step(std::span<const StepToken> tokens) {
  const ModelConfig& c = model_->config();
  const Weights& w = model_->weights();
  const NativeWeights* nw = model_->native();
  // A projection's MatmulOut: the quantized matrix when the model keeps one, else fp32 rows.
  using PerLayer = std::vector<QuantMatrix> NativeWeights::*;
  auto proj = [&](float* out, const float* f32, int d, PerLayer which, int layer) {
    MatmulOut o{out, f32, d};
    if (nw != nullptr) o.q = (nw->*which)[sz(layer)];
    return o;
  };
  const long dim = c.dim, kv_dim = c.kv_dim(), q_dim = c.q_dim(), hidden = c.hidden_dim;
  const int m = static_cast<int>(tokens.size());
  const std::size_t wanted = check_step(tokens);
  reserve(0, wanted);
  const std::span<float> logits(logits_.data(), wanted * sz(c.vocab_size));
  if (backend_.run_step(*model_, tokens, logits, {})) return logits;  // in the backend's memory
  reserve(tokens.size(), 0);
  const AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim()};
  auto row = [](AlignedVector<float>& buf, long width, int t) { return buf.data() + t * width; };

  // Each token's attention query (the q_ and att_ rows are the same in every layer).
  std::vector<AttentionQuery> queries;
  queries.reserve(tokens.size());
  for (int t = 0; t < m; ++t) {
    const StepToken& s = tokens[sz(t)];
    queries.push_back({s.view, row(q_, q_dim, t), row(att_, q_dim, t), s.pos, s.observer});
  }
  // Token embeddings.
  for (int t = 0; t < m; ++t) {
    std::memcpy(row(x_, dim, t), w.token_embedding + tokens[sz(t)].token * dim, sz(dim) * 4);
  }
  for (int l = 0; l < c.n_layers; ++l) {
    // Attention block: pre-norm, then the Q, K, V projections of every token.
    for (int t = 0; t < m; ++t)
      backend_.rmsnorm(row(xn_, dim, t), row(x_, dim, t), w.rms_att + l * dim, c.dim, c.rms_eps);
    const MatmulOut qkv[] = {
        proj(q_.data(), w.wq + l * q_dim * dim, c.q_dim(), &NativeWeights::wq, l),
        proj(k_.data(), w.wk + l * kv_dim * dim, c.kv_dim(), &NativeWeights::wk, l),
        proj(v_.data(), w.wv + l * kv_dim * dim, c.kv_dim(), &NativeWeights::wv, l)};
    backend_.matmul_batch(xn_.data(), m, c.dim, qkv);
    // RoPE at each token's position, then its K/V into its view's write slot. Every token of
    // the step is written before any attends: a view's num_slots hides the later ones.
    for (int t = 0; t < m; ++t) {
      const StepToken& s = tokens[sz(t)];
      backend_.rope(row(q_, q_dim, t), row(k_, kv_dim, t), s.pos, c.q_dim(), c.kv_dim(),
                    c.head_dim(), c.rope_theta);
      backend_.kv_write(s.view, l, row(k_, kv_dim, t), row(v_, kv_dim, t));
    }
    // softmax(q K^T / sqrt(d)) V over each token's visible slots.
    backend_.attention_batch(l, shape, queries);
    // Output projection and residual.
    const MatmulOut wo[] = {
        proj(proj_.data(), w.wo + l * dim * q_dim, c.dim, &NativeWeights::wo, l)};
    backend_.matmul_batch(att_.data(), m, c.q_dim(), wo);
    for (long i = 0; i < m * dim; ++i) x_[sz(i)] += proj_[sz(i)];

    // FFN block: pre-norm, SwiGLU, down projection, residual.
    for (int t = 0; t < m; ++t)
      backend_.rmsnorm(row(xn_, dim, t), row(x_, dim, t), w.rms_ffn + l * dim, c.dim, c.rms_eps);
    const MatmulOut gate_up[] = {
        proj(hb_.data(), w.w1 + l * hidden * dim, c.hidden_dim, &NativeWeights::w1, l),
        proj(hb2_.data(), w.w3 + l * hidden * dim, c.hidden_dim, &NativeWeights::w3, l)};
    backend_.matmul_batch(xn_.data(), m, c.dim, gate_up);
    for (int t = 0; t < m; ++t)
      backend_.swiglu(row(hb_, hidden, t), row(hb2_, hidden, t), c.hidden_dim);
    const MatmulOut down[] = {
        proj(proj_.data(), w.w2 + l * dim * hidden, c.dim, &NativeWeights::w2, l)};
    backend_.matmul_batch(hb_.data(), m, c.hidden_dim, down);
    for (long i = 0; i < m * dim; ++i) x_[sz(i)] += proj_[sz(i)];
  }

  // Final norm and classifier, only for the tokens whose logits are wanted.
  int k = 0;
  for (int t = 0; t < m; ++t) {
    if (!tokens[sz(t)].want_logits) continue;
    backend_.rmsnorm(row(last_, dim, k), row(x_, dim, t), w.rms_final, c.dim, c.rms_eps);
    ++k;
  }
  if (k == 0) return {};
  MatmulOut cls[] = {{logits_.data(), w.wcls, c.vocab_size}};
  if (nw != nullptr) cls[0].q = nw->wcls;
  backend_.matmul_batch(last_.data(), k, c.dim, cls);
  return logits;
}

std::int64_t matmul_macs_per_token(const ModelConfig& c) {
  const std::int64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim;
  return c.n_layers * (d * q * 2 + d * kv * 2 + d * h * 3) + d * c.vocab_size;
}

std::int64_t weight_bytes_per_token(const Model& model) {
  const ModelConfig& c = model.config();
  const NativeWeights* nw = model.native();
  const std::int64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim;
  // One matrix of `rows` x `cols`: its quantized rows when kept, else fp32.
  auto bytes = [&](const QuantMatrix* m, std::int64_t rows, std::int64_t cols) {
    return m != nullptr && m->data != nullptr ? rows * m->row_bytes : rows * cols * 4;
  };
  auto at = [&](const std::vector<QuantMatrix> NativeWeights::*which, int l) {
    return nw != nullptr ? &(nw->*which)[sz(l)] : nullptr;
  };
  std::int64_t total = bytes(nw != nullptr ? &nw->wcls : nullptr, c.vocab_size, d);
  for (int l = 0; l < c.n_layers; ++l) {
    total += bytes(at(&NativeWeights::wq, l), q, d) + bytes(at(&NativeWeights::wk, l), kv, d) +
             bytes(at(&NativeWeights::wv, l), kv, d) + bytes(at(&NativeWeights::wo, l), d, q) +
             bytes(at(&NativeWeights::w1, l), h, d) + bytes(at(&NativeWeights::w2, l), d, h) +
             bytes(at(&NativeWeights::w3, l), h, d);
  }
  return total;
}

}  // namespace kvscope

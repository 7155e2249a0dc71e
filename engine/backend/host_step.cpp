#include "engine/backend/host_step.h"

#include <algorithm>
#include <string>

#include "engine/common/error.h"
#include "engine/model/checkpoint.h"
#include "engine/model/sampler.h"

namespace kvscope {
namespace {

std::size_t sz(long v) {
  return static_cast<std::size_t>(v);
}

// A projection's MatmulOut: the quantized matrix when the model keeps one, else fp32 rows.
using PerLayer = std::vector<QuantMatrix> NativeWeights::*;
MatmulOut proj(const NativeWeights* nw, float* out, const float* f32, int d, PerLayer which,
               int layer) {
  MatmulOut o{out, f32, d};
  if (nw != nullptr) o.q = (nw->*which)[sz(layer)];
  return o;
}

// Token t's row of a [m][width] activation buffer.
float* row(AlignedVector<float>& buf, long width, int t) {
  return buf.data() + t * width;
}

}  // namespace

void HostStep::reserve(const Model& model, std::size_t tokens, std::size_t logit_rows) {
  const ModelConfig& c = model.config();
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
  }
}

void HostStep::run(Backend& ops, const Model& model, std::span<const StepToken> tokens,
                   std::span<float> logits, std::span<int> greedy) {
  const ModelConfig& c = model.config();
  const Weights& w = model.forward_weights();
  const NativeWeights* nw = model.native();
  std::size_t wanted = 0;
  for (const StepToken& t : tokens) wanted += t.want_logits ? 1 : 0;
  const auto vocab = sz(c.vocab_size);
  if ((!logits.empty() && logits.size() != wanted * vocab) ||
      (!greedy.empty() && greedy.size() != wanted)) {
    throw InternalError("host step", std::to_string(wanted) + " tokens want logits; given " +
                                         std::to_string(logits.size()) + " logits and " +
                                         std::to_string(greedy.size()) + " argmax slots");
  }
  if (logits.empty() && !greedy.empty()) {  // only the argmax leaves: the logits stay here
    if (logits_.size() < wanted * vocab) logits_.resize(wanted * vocab);
    logits = std::span<float>(logits_.data(), wanted * vocab);
  }
  reserve(model, tokens.size(), wanted);
  const long dim = c.dim;
  const int m = static_cast<int>(tokens.size());
  begin(model, tokens);
  for (int l = 0; l < c.n_layers; ++l) {
    attention_block(ops, model, tokens, l);
    ffn_block(ops, model, m, l);
  }

  // Final norm and classifier, only for the tokens whose logits are wanted (and only when someone
  // reads them).
  if (wanted == 0 || logits.empty()) return;
  int k = 0;
  for (int t = 0; t < m; ++t) {
    if (!tokens[sz(t)].want_logits) continue;
    ops.rmsnorm(row(last_, dim, k), row(x_, dim, t), w.rms_final, c.dim, c.rms_eps);
    ++k;
  }
  MatmulOut cls[] = {{logits.data(), w.wcls, c.vocab_size}};
  if (nw != nullptr) cls[0].q = nw->wcls;
  ops.matmul_batch(last_.data(), k, c.dim, cls);
  for (std::size_t i = 0; i < greedy.size(); ++i)
    greedy[i] = argmax(logits.subspan(i * vocab, vocab));
}

void HostStep::set_queries(const Model& model, std::span<const StepToken> tokens) {
  const long q_dim = model.config().q_dim();
  queries_.clear();
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    const StepToken& s = tokens[t];
    const int r = static_cast<int>(t);
    queries_.push_back({s.view, row(q_, q_dim, r), row(att_, q_dim, r), s.pos, s.observer});
  }
}

void HostStep::begin(const Model& model, std::span<const StepToken> tokens) {
  // Each token's attention query (the q_ and att_ rows are the same in every layer).
  set_queries(model, tokens);
  // Token embeddings.
  const long dim = model.config().dim;
  for (std::size_t t = 0; t < tokens.size(); ++t)
    model.embedding_row(tokens[t].token, row(x_, dim, static_cast<int>(t)));
}

void HostStep::run_narrowing(Backend& ops, const Model& model, std::span<const StepToken> tokens,
                             const StepNarrowing& narrow) {
  const ModelConfig& c = model.config();
  for (const StepToken& t : tokens) {
    if (t.want_logits) throw InternalError("host step", "a narrowing step gives no logits");
  }
  reserve(model, tokens.size(), 0);
  const long dim = c.dim;
  std::vector<StepToken> live(tokens.begin(), tokens.end());
  begin(model, live);
  for (int l = 0; l < c.n_layers && !live.empty(); ++l) {
    attention_block(ops, model, live, l);
    ffn_block(ops, model, static_cast<int>(live.size()), l);
    if (l + 1 == c.n_layers) break;
    const std::optional<std::vector<int>> keep = narrow(l, live);
    if (!keep) continue;
    // The kept tokens' residual rows move to the front (keep is ascending, so each row moves
    // down or stays), then their queries are pointed at their new rows.
    std::vector<StepToken> next;
    next.reserve(keep->size());
    for (const int i : *keep) {
      if (i < 0 || static_cast<std::size_t>(i) >= live.size() ||
          (!next.empty() && i <= keep->at(next.size() - 1))) {
        throw InternalError("host step", "narrowing after layer " + std::to_string(l) +
                                             " kept index " + std::to_string(i) +
                                             ": not ascending within " +
                                             std::to_string(live.size()) + " tokens");
      }
      const auto j = static_cast<int>(next.size());
      if (j != i) std::copy_n(row(x_, dim, i), dim, row(x_, dim, j));
      next.push_back(live[sz(i)]);
    }
    live = std::move(next);
    set_queries(model, live);
  }
}

void HostStep::attention_block(Backend& ops, const Model& model, std::span<const StepToken> tokens,
                               int l) {
  const ModelConfig& c = model.config();
  const Weights& w = model.forward_weights();
  const NativeWeights* nw = model.native();
  const long dim = c.dim, kv_dim = c.kv_dim(), q_dim = c.q_dim();
  const int m = static_cast<int>(tokens.size());
  const AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim()};
  // Attention block: pre-norm, then the Q, K, V projections of every token.
  for (int t = 0; t < m; ++t)
    ops.rmsnorm(row(xn_, dim, t), row(x_, dim, t), w.rms_att + l * dim, c.dim, c.rms_eps);
  const MatmulOut qkv[] = {
      proj(nw, q_.data(), w.wq + l * q_dim * dim, c.q_dim(), &NativeWeights::wq, l),
      proj(nw, k_.data(), w.wk + l * kv_dim * dim, c.kv_dim(), &NativeWeights::wk, l),
      proj(nw, v_.data(), w.wv + l * kv_dim * dim, c.kv_dim(), &NativeWeights::wv, l)};
  ops.matmul_batch(xn_.data(), m, c.dim, qkv);
  // RoPE at each token's position, then its K/V into its view's write slot. Every token of
  // the step is written before any attends: a view's num_slots hides the later ones.
  for (int t = 0; t < m; ++t) {
    const StepToken& s = tokens[sz(t)];
    ops.rope(row(q_, q_dim, t), row(k_, kv_dim, t), s.pos, c.q_dim(), c.kv_dim(), c.head_dim(),
             c.rope_theta);
    ops.kv_write(s.view, l, row(k_, kv_dim, t), row(v_, kv_dim, t));
  }
  // softmax(q K^T / sqrt(d)) V over each token's visible slots.
  ops.attention_batch(l, shape, queries_);
  // Output projection and residual.
  const MatmulOut wo[] = {
      proj(nw, proj_.data(), w.wo + l * dim * q_dim, c.dim, &NativeWeights::wo, l)};
  ops.matmul_batch(att_.data(), m, c.q_dim(), wo);
  for (long i = 0; i < m * dim; ++i) x_[sz(i)] += proj_[sz(i)];
}

void HostStep::ffn_block(Backend& ops, const Model& model, int m, int l) {
  const ModelConfig& c = model.config();
  const Weights& w = model.forward_weights();
  const NativeWeights* nw = model.native();
  const long dim = c.dim, hidden = c.hidden_dim;
  // FFN block: pre-norm, SwiGLU, down projection, residual.
  for (int t = 0; t < m; ++t)
    ops.rmsnorm(row(xn_, dim, t), row(x_, dim, t), w.rms_ffn + l * dim, c.dim, c.rms_eps);
  const MatmulOut gate_up[] = {
      proj(nw, hb_.data(), w.w1 + l * hidden * dim, c.hidden_dim, &NativeWeights::w1, l),
      proj(nw, hb2_.data(), w.w3 + l * hidden * dim, c.hidden_dim, &NativeWeights::w3, l)};
  ops.matmul_batch(xn_.data(), m, c.dim, gate_up);
  for (int t = 0; t < m; ++t) ops.swiglu(row(hb_, hidden, t), row(hb2_, hidden, t), c.hidden_dim);
  const MatmulOut down[] = {
      proj(nw, proj_.data(), w.w2 + l * dim * hidden, c.dim, &NativeWeights::w2, l)};
  ops.matmul_batch(hb_.data(), m, c.hidden_dim, down);
  for (long i = 0; i < m * dim; ++i) x_[sz(i)] += proj_[sz(i)];
}

}  // namespace kvscope

// The engine step's front: checks the tokens, splits a step into the sub-steps that must run one
// after the other, and hands each to the backend (engine/backend/host_step.cpp composes the
// forward pass for the host backends).
#include "engine/infer/transformer.h"

#include <algorithm>
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
    : model_(std::move(model)), backend_(backend) {}

std::span<float> Transformer::forward(int token, int pos, const KvSeqView& kv,
                                      AttentionObserver* observer) {
  const StepToken one{token, pos, kv, true, observer};
  return forward_step(std::span<const StepToken>(&one, 1));
}

namespace {

// KIVI quantizes a group of keys when its last token is written and then drops the group's
// full-precision staging, which earlier tokens of the same group still attend through: within a
// KIVI pool a sequence's tokens must each be written and attended before the next is written,
// unless the sequence keeps a decoded copy (with the rows as written) that the backend reads.
bool writes_change_earlier_slots(const KvSeqView& v, const Backend& backend) {
  const KvLayout& l = v.storage->layout();
  if (v.decoded != nullptr && backend.keeps_decoded_copies()) return false;
  return l.k_format.is_kivi() || l.v_format.is_kivi();
}

}  // namespace

int Transformer::sub_steps(std::span<const StepToken> tokens, std::vector<int>& group) const {
  bool ordered = false;
  for (const StepToken& t : tokens)
    ordered = ordered || writes_change_earlier_slots(t.view, backend_);
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
    backend_.run_step(*model_, tokens, {}, greedy_);
    return greedy_;
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
  const std::span<float> logits = logit_rows(out.size());
  std::copy(out.begin(), out.end(), logits.begin());
  return logits;
}

std::span<float> Transformer::logit_rows(std::size_t floats) {
  if (logits_.size() < floats) logits_.resize(floats);  // grown to the largest step, then reused
  return std::span<float>(logits_.data(), floats);
}

std::span<float> Transformer::run_step(std::span<const StepToken> tokens) {
  const std::size_t wanted = check_step(tokens);
  const std::span<float> logits =
      logit_rows(wanted * static_cast<std::size_t>(model_->config().vocab_size));
  backend_.run_step(*model_, tokens, logits, {});
  return logits;
}

void add_chunk(std::vector<StepToken>& step, const KvSeqView& view, int first_slot,
               std::span<const int> tokens, int first_pos, bool want_logits,
               AttentionObserver* observer) {
  const int n = static_cast<int>(tokens.size());
  if (first_slot < 0 || first_slot + n > view.num_slots) {
    throw InternalError("add_chunk", "slots [" + std::to_string(first_slot) + ", " +
                                         std::to_string(first_slot + n) + ") outside a view of " +
                                         std::to_string(view.num_slots));
  }
  for (int i = 0; i < n; ++i) {
    KvSeqView own = view;
    own.num_slots = first_slot + i + 1;
    step.push_back(StepToken{tokens[sz(i)], first_pos + i, own, want_logits, observer});
  }
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

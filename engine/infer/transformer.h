// Transformer: the Llama forward pass, reading and writing K/V only through KvSeqViews. It never
// knows which allocator, eviction policy or KV format is behind a view.
//
// One engine step runs as one call (forward_step), which the backend runs whole in its own memory
// (Backend::run_step): the projections, the FFN and the classifier are products over all of the
// step's tokens, so every weight is read once per step however many sequences run; attention runs
// per token over its own view. Each output element is computed in
// the same order as for a token run alone, so a batched step is bit-identical to its tokens run
// one by one (tests/sched/simulator_test.cpp, BatchedEqualsSolo; tests/infer/forward_step_test).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/common/aligned_vector.h"
#include "engine/model/checkpoint.h"

namespace kvscope {

class Transformer {
 public:
  // Tokens per sub-step: a longer step runs as consecutive sub-steps of at most this many, so
  // activation memory stays bounded however large a prefill chunk is.
  static constexpr std::size_t kMaxStepTokens = 256;

  Transformer(std::shared_ptr<const Model> model, Backend& backend);

  const ModelConfig& config() const { return model_->config(); }
  const Model& model() const { return *model_; }
  Backend& backend() { return backend_; }

  // Runs every token of a step. Tokens of one sequence come in position order, each view with a
  // slot reserved for its token. Returns the logits of the tokens with want_logits, in their
  // order, [count][vocab] row-major, valid until the next call. In a KIVI pool (where writing a
  // token can quantize the group earlier tokens attend through) the step runs in waves, the k-th
  // token of every sequence in wave k (a sequence is identified by its view's block table), so
  // each token still sees what it would alone.
  std::span<float> forward_step(std::span<const StepToken> tokens);

  // forward_step for a caller that samples greedily: the index of the largest logit (the lowest
  // among equals) of each token with want_logits, in step order, valid until the next call. A
  // backend that runs the step in its own memory takes the argmax there (the CUDA backend: one
  // int per token read back instead of a row of logits).
  std::span<const int> greedy_step(std::span<const StepToken> tokens);

  // One token alone: forward_step of {token, pos, kv, logits wanted}. Returns the logits [vocab].
  std::span<float> forward(int token, int pos, const KvSeqView& kv,
                           AttentionObserver* observer = nullptr);

 private:
  // forward_step's work for tokens that may all be written before any attends.
  std::span<float> run_step(std::span<const StepToken> tokens);
  // Checks the tokens' ids; returns how many want logits.
  std::size_t check_step(std::span<const StepToken> tokens) const;
  // Whether forward_step runs `tokens` as several sub-steps (KIVI's waves, or past
  // kMaxStepTokens); group[i] is token i's sub-step.
  int sub_steps(std::span<const StepToken> tokens, std::vector<int>& group) const;
  // The first `floats` of logits_, grown when a step wants more.
  std::span<float> logit_rows(std::size_t floats);

  std::shared_ptr<const Model> model_;
  Backend& backend_;
  // The host copies of what a step gives back (the activations are the backend's).
  AlignedVector<float> logits_;  // [k][vocab]
  std::vector<int> greedy_;      // [k]: greedy_step's tokens
};

// Appends one sequence's chunk to a step: tokens[i], at RoPE position first_pos + i, writes slot
// first_slot + i of `view` (which holds the chunk's slots) and attends to the slots up to its own
// (its StepToken's view ends there), so the chunk is causal without anyone patching a view between
// tokens. Every token gets want_logits and observer as given.
void add_chunk(std::vector<StepToken>& step, const KvSeqView& view, int first_slot,
               std::span<const int> tokens, int first_pos, bool want_logits = false,
               AttentionObserver* observer = nullptr);

// Bytes of weights one decoded token reads: every layer's projections and FFN and the classifier,
// as the forward pass reads them (the quantized blocks of native() matrices, fp32 otherwise); the
// embedding row and the norms are left out (a few KB).
std::int64_t weight_bytes_per_token(const Model& model);
// Multiply-adds of those matmuls per token (the same matrices' element count).
std::int64_t matmul_macs_per_token(const ModelConfig& c);

}  // namespace kvscope

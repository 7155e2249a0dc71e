// HostStep: an engine step composed from a backend's ops on host activation buffers. A backend
// whose ops work on host memory (the CPU backend; OpByOp, which drives another backend one op at a
// time) owns one and runs its Backend::run_step through it, so the activations belong to the
// backend, as a device backend's belong to its device. The forward pass, top to bottom as in the
// Llama paper: embed, then per layer attention and SwiGLU FFN with pre-RMSNorm and residuals, then
// the final norm and the classifier, over all the tokens of the step at once.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/common/aligned_vector.h"

namespace kvscope {

// A step whose later layers run for fewer tokens (CacheBlend's selective recompute,
// engine/analysis/cache_blend.h): called after each layer but the last with the tokens that ran
// it; a value narrows the step to those tokens (indices into `tokens`, ascending), which alone run
// the later layers. The others stop there: their K/V of the later layers stay as their views
// hold them. nullopt keeps every token.
using StepNarrowing =
    std::function<std::optional<std::vector<int>>(int layer, std::span<const StepToken> tokens)>;

class HostStep {
 public:
  // Backend::run_step's contract, each op run by `ops`: the logits of the tokens with want_logits
  // into `logits` when it is not empty, their argmax into `greedy` when that is not empty.
  void run(Backend& ops, const Model& model, std::span<const StepToken> tokens,
           std::span<float> logits, std::span<int> greedy);
  // The forward pass of `tokens` (none wanting logits) through every layer, narrowed after a layer
  // where `narrow` says so. With no narrowing it writes what run() writes, bit for bit.
  void run_narrowing(Backend& ops, const Model& model, std::span<const StepToken> tokens,
                     const StepNarrowing& narrow);

 private:
  void reserve(const Model& model, std::size_t tokens, std::size_t logit_rows);
  // One layer's two blocks, each read from and added back into the residual stream x_.
  void attention_block(Backend& ops, const Model& model, std::span<const StepToken> tokens,
                       int layer);
  void ffn_block(Backend& ops, const Model& model, int m, int layer);
  // Points token t's attention query at row t of q_ and att_.
  void set_queries(const Model& model, std::span<const StepToken> tokens);
  // set_queries, and the tokens' embeddings into x_.
  void begin(const Model& model, std::span<const StepToken> tokens);

  // Activations for up to capacity_ tokens, one row per token (grown to the largest step, then
  // reused; cache-line aligned, so every row starts on a line when its width is a multiple of 16
  // floats, as all of SmolLM2's are).
  std::size_t capacity_ = 0, logit_capacity_ = 0;
  AlignedVector<float> x_;       // [m][dim] residual stream
  AlignedVector<float> xn_;      // [m][dim] normed input of a block
  AlignedVector<float> q_;       // [m][q_dim]
  AlignedVector<float> k_;       // [m][kv_dim]
  AlignedVector<float> v_;       // [m][kv_dim]
  AlignedVector<float> att_;     // [m][q_dim] attention output
  AlignedVector<float> proj_;    // [m][dim] output / down projection
  AlignedVector<float> hb_;      // [m][hidden]
  AlignedVector<float> hb2_;     // [m][hidden]
  AlignedVector<float> last_;    // [k][dim] normed final states of the tokens that want logits
  AlignedVector<float> logits_;  // [k][vocab] when the caller wants only the argmax
  std::vector<AttentionQuery> queries_;
};

}  // namespace kvscope

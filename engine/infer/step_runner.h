// Running a run of tokens of one sequence as batched steps: the loop "append a slot, forward one
// token" that evaluation, analysis and tools repeat, done as one Transformer::forward_step per
// chunk of tokens, so the weights are read once per chunk instead of once per token. Results are
// bit-identical to the token-by-token loop (tests/infer/step_runner_test.cpp).
#pragma once

#include <functional>
#include <memory>
#include <span>

#include "engine/infer/transformer.h"
#include "engine/kv/cache_manager.h"
#include "engine/kv/decoded_kv.h"
#include "engine/kv/kv_storage.h"

namespace kvscope {

// Tokens per forward_step: activations and logits for this many tokens at once (SmolLM2: 6 MiB
// of logits), enough to turn the weight stream into arithmetic.
inline constexpr int kDefaultStepTokens = 32;

// Runs tokens[i] at position first_pos + i through `seq` (a sequence of `cache` whose next slot is
// position first_pos), appending the slots itself, `step_tokens` tokens per forward_step. Calls
// on_logits(position, logits) for every token, in order; an empty on_logits computes no logits
// (the classifier is a fifth of SmolLM2's per-token work), for runs that only fill the cache.
// `mla`: the codec when the pool is an MLA latent cache. The cache must have room (running out is
// a bug in the caller's sizing).
void run_tokens(Transformer& t, KvCacheManager& cache, SeqId seq, std::span<const int> tokens,
                int first_pos, const MlaCodec* mla,
                const std::function<void(int, std::span<const float>)>& on_logits,
                int step_tokens = kDefaultStepTokens);

// One sequence in a paged cache of its own, with just the blocks `max_tokens` tokens need: what
// evaluation, analysis, tools and the UI's jobs run a token window through. Replaces the
// repeated "make a cache, add a sequence, append a slot, forward".
class SoloSequence {
 public:
  // `layout` gives the shape and formats (kv_layout_for, mla_layout_for); its num_blocks is set
  // here from max_tokens. `mla`: the codec when the layout is an MLA latent cache.
  SoloSequence(const KvLayout& layout, int max_tokens, const MlaCodec* mla = nullptr);
  // Keeps a float copy of the sequence's K and V (DecodedKvCache) in every view it hands out, so
  // that attention over a quantized cache dequantizes each slot once instead of once per query;
  // the same results, bit for bit, for the fp32 cache's bytes again. Does nothing for an fp32 or
  // latent pool. For evaluation runs, before the first token.
  void keep_decoded();
  // Tokens held so far: the next token's position.
  int size() const { return size_; }
  KvCacheManager& cache() { return cache_; }
  static constexpr SeqId kSeq{0};

  // tokens[i] at position size() + i, kDefaultStepTokens per forward_step (run_tokens).
  void run(Transformer& t, std::span<const int> tokens,
           const std::function<void(int, std::span<const float>)>& on_logits,
           int step_tokens = kDefaultStepTokens);
  // One token at position size(), alone in its step: an attention observer sees one query's rows
  // at a time (AttentionRecorder rolls its per-query state on a new position). Its logits.
  std::span<const float> step(Transformer& t, int token, AttentionObserver* observer = nullptr);
  // tokens[i] at position size() + i, `step_tokens` per forward_step, every query's attention
  // rows handed to `observer` as step() would hand them: a query's rows (layer by layer, head by
  // head) before the next query's. The step's rows are held until it ends (layers x heads x
  // step_tokens rows of up to size() floats: 17 MiB for SmolLM2 at 2,048 tokens and 8 a step).
  void watch(Transformer& t, std::span<const int> tokens, AttentionObserver& observer,
             int step_tokens = 8);
  // Appends the slot of position size() without running anything; the view that writes it (for
  // a step the caller builds, or K/V the caller writes itself).
  KvSeqView append();
  // The sequence's view as it stands (its slots so far), the codec set for a latent cache.
  KvSeqView view();

 private:
  KvCacheManager cache_;
  const MlaCodec* mla_;
  std::unique_ptr<DecodedKvCache> decoded_;
  int max_tokens_;
  int size_ = 0;
};

}  // namespace kvscope

// Running a run of tokens of one sequence as batched steps: the loop "append a slot, forward one
// token" that evaluation, analysis and tools repeat, done as one Transformer::forward_step per
// chunk of tokens, so the weights are read once per chunk instead of once per token. Results are
// bit-identical to the token-by-token loop (tests/infer/step_runner_test.cpp).
#pragma once

#include <functional>
#include <span>

#include "engine/infer/transformer.h"
#include "engine/kv/cache_manager.h"

namespace kvscope {

// Tokens per forward_step: activations and logits for this many tokens at once (SmolLM2: 6 MiB
// of logits), enough to turn the weight stream into arithmetic.
inline constexpr int kDefaultStepTokens = 32;

// Runs tokens[i] at position first_pos + i through `seq` (a sequence of `cache` whose next slot is
// position first_pos), appending the slots itself, `step_tokens` tokens per forward_step. Calls
// on_logits(position, logits) for every token, in order. `mla`: the codec when the pool is an MLA
// latent cache. The cache must have room (running out is a bug in the caller's sizing).
void run_tokens(Transformer& t, KvCacheManager& cache, SeqId seq, std::span<const int> tokens,
                int first_pos, const MlaCodec* mla,
                const std::function<void(int, std::span<const float>)>& on_logits,
                int step_tokens = kDefaultStepTokens);

}  // namespace kvscope

// Single-sequence generation, llama2.c's run loop: prompt tokens are forced, then sampled tokens,
// `steps` positions in all, stopping early at BOS. Used by `kvscope generate` and golden tests.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/kv/cache_manager.h"
#include "engine/model/sampler.h"
#include "engine/model/tokenizer.h"
#include "engine/model/transformer.h"

namespace kvscope {

struct GenerateOptions {
  std::string prompt;
  int steps = 256;  // positions including the prompt's (run.c's -n)
  SamplerConfig sampler;
  AllocatorKind allocator = AllocatorKind::kContiguous;
  int block_size = 16;
  KvFormat k_format;
  KvFormat v_format;
  // MLA latent cache (engine/mla) instead of K/V: latents (and RoPE keys) in k_format.
  const MlaCodec* mla = nullptr;
};

struct GenerateResult {
  std::vector<int> tokens;  // every token fed or produced, BOS first
  int num_prompt_tokens = 0;
  int num_generated = 0;    // tokens sampled (not forced from the prompt)
  double seconds = 0.0;     // wall time from the first sampled token on (run.c's measure)
  long kv_bytes_allocated = 0;
  long kv_bytes_used = 0;
};

// Calls on_piece(text) for each printable piece, exactly what run.c prints.
GenerateResult generate(Transformer& transformer, const Tokenizer& tokenizer,
                        const GenerateOptions& options,
                        const std::function<void(const std::string&)>& on_piece);

// Same loop without a tokenizer: starts from BOS, forces `prompt_tokens` (after BOS), and keeps
// every step's logits when `logits_out` is given ([steps][vocab]).
std::vector<int> generate_tokens(Transformer& transformer, const std::vector<int>& prompt_tokens,
                                 int steps, const GenerateOptions& options,
                                 std::vector<std::vector<float>>* logits_out);

}  // namespace kvscope

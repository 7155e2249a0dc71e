// Single-sequence generation, llama2.c's run loop: prompt tokens are forced, then sampled tokens,
// `steps` positions in all, stopping early at a stop token (BOS for llama2.c models, the end of
// turn for chat models). Used by `kvscope generate` and golden tests.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/infer/transformer.h"
#include "engine/kv/cache_manager.h"
#include "engine/model/sampler.h"
#include "engine/model/tokenizer.h"

namespace kvscope {

// Optional control of what stands behind the cache view during generation (token eviction
// plugs in here): the loop asks it for each token's view, RoPE position and attention observer,
// and tells it when the token's logits have been used. The forward pass never knows.
class SequenceCacheHook {
 public:
  virtual ~SequenceCacheHook() = default;
  // The sequence now exists in `cache` (paged); `backend` runs its forward pass (and applies any
  // change the hook makes to the pool's bytes).
  virtual void begin(KvCacheManager& cache, SeqId seq, Backend& backend) = 0;
  // After append_slots for the next token: its view, RoPE position and observer (may be null).
  virtual KvSeqView view() = 0;
  virtual int position() const = 0;
  virtual AttentionObserver* observer() = 0;
  // The token's logits have been used.
  virtual void after_token() = 0;
};

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
  // Allows steps > the model's seq_len (positions past the trained context; the cache is sized
  // for `steps`). Off by default: run.c stops at seq_len.
  bool past_context = false;
  // run.c stops when the model emits BOS (any stop token); false feeds it and goes on with the
  // next story.
  bool stop_at_bos = true;
  // Whether generate() passes the forced prompt's pieces to on_piece (run.c echoes the prompt).
  bool echo_prompt = true;
  // The token generate_tokens starts from (the tokenizer's BOS; llama2.c's is 1).
  int start_token = kTokenBos;
  SequenceCacheHook* cache_hook = nullptr;  // needs the paged allocator
  // Fills GenerateResult::next_logprob (a log-softmax over the vocabulary per position: off by
  // default, it costs as much as the attention of a small model).
  bool score_tokens = false;
};

struct GenerateResult {
  std::vector<int> tokens;  // every token fed or produced, BOS first
  int num_prompt_tokens = 0;
  int num_generated = 0;  // tokens sampled (not forced from the prompt)
  // Wall time of the prompt's positions (their forward passes, in chunks: the last one gives the
  // first sample's logits) and of the positions after them, one per step. With no prompt (BOS
  // alone) the prefill is BOS's position and the decode time is run.c's measure (from the end of
  // the first forward on).
  int prefill_positions = 0;
  int positions_run = 0;  // forward passes run, prefill included (fewer than steps on a stop)
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  long kv_bytes_allocated = 0;
  long kv_bytes_used = 0;
  long peak_kv_bytes = 0;           // most block bytes held at once
  std::vector<float> next_logprob;  // [tokens - 1] log p(tokens[i + 1] | tokens[..i]) as run
                                    // (GenerateOptions::score_tokens only)
};

// The settings generate() names in its errors (their where()), in the engine's words; a caller
// that knows which flag carried one puts that in its place (setting_source.h).
inline constexpr std::string_view kGenerateSteps = "steps";
inline constexpr std::string_view kGenerateAllocator = "allocator";
inline constexpr std::string_view kGeneratePrompt = "prompt";

// What generate() needs of `options` on a model of shape `model`, before anything runs: steps in
// [1, seq_len] (past_context: [1, 1000000]) and the paged allocator under a cache hook. Throws
// kvscope::Error located at kGenerateSteps or kGenerateAllocator.
void validate(const GenerateOptions& options, const ModelConfig& model);

// Calls on_piece(text) for each printable piece, exactly what run.c prints. Throws
// kvscope::Error as validate() does, and located at kGeneratePrompt when the prompt encodes to no
// token and the tokenizer has no BOS to start from.
GenerateResult generate(Transformer& transformer, const Tokenizer& tokenizer,
                        const GenerateOptions& options,
                        const std::function<void(const std::string&)>& on_piece);

// Same loop without a tokenizer: starts from options.start_token, forces `prompt_tokens` (after
// it), stops when the start token comes back (unless !stop_at_bos), and keeps every step's logits
// when `logits_out` is given ([steps][vocab]).
std::vector<int> generate_tokens(Transformer& transformer, const std::vector<int>& prompt_tokens,
                                 int steps, const GenerateOptions& options,
                                 std::vector<std::vector<float>>* logits_out);

}  // namespace kvscope

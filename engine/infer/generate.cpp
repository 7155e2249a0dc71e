// The generation loop.
#include "engine/infer/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "engine/common/error.h"
#include "engine/common/log_softmax.h"
#include "engine/infer/step_runner.h"
#include "engine/mla/mla_codec.h"

namespace kvscope {
namespace {

KvCacheManager make_cache(const ModelConfig& c, const GenerateOptions& o, int steps) {
  const int blocks = (steps + o.block_size - 1) / o.block_size;
  const KvLayout layout = o.mla != nullptr
                              ? mla_layout_for(c, *o.mla, o.block_size, blocks, o.k_format)
                              : kv_layout_for(c, o.block_size, blocks, o.k_format, o.v_format);
  return KvCacheManager(layout, o.allocator, steps, /*with_storage=*/true);
}

void check_steps(const ModelConfig& c, int steps, bool past_context = false) {
  const std::string where(kGenerateSteps);
  if (past_context) {
    if (steps < 1 || steps > 1'000'000) {
      fail_expected(where, "an integer in [1, 1000000]", std::to_string(steps));
    }
    return;
  }
  if (steps < 1 || steps > c.seq_len) {
    fail_expected(where,
                  "an integer in [1, " + std::to_string(c.seq_len) + "] (the model's seq_len)",
                  std::to_string(steps));
  }
}

// The sequence's view, the MLA codec set: the hook's (asking registers the new slot) or the
// cache's.
KvSeqView sequence_view(KvCacheManager& cache, SeqId seq, SequenceCacheHook* hook,
                        const MlaCodec* mla) {
  KvSeqView view = hook != nullptr ? hook->view() : cache.view(seq);
  view.mla = mla;
  return view;
}

// One position through the hook's view (view first, then its position and observer) or the plain
// one.
std::span<float> forward_one(Transformer& t, KvCacheManager& cache, SeqId seq,
                             SequenceCacheHook* hook, int token, int pos, const MlaCodec* mla) {
  const KvSeqView view = sequence_view(cache, seq, hook, mla);
  if (hook == nullptr) return t.forward(token, pos, view);
  const int rope_pos = hook->position();
  return t.forward(token, rope_pos, view, hook->observer());
}

// The prompt's tokens, or BOS alone when it encodes to none.
std::vector<int> encode_prompt(const Tokenizer& tokenizer, const std::string& text) {
  std::vector<int> prompt = tokenizer.encode(text, tokenizer.adds_bos(), /*eos=*/false);
  if (prompt.empty()) {
    // Nothing to start from: BOS, when the vocabulary has one (a tokenizer.json without a BOS
    // template has none, and -1 is no token).
    if (tokenizer.bos_id() < 0)
      throw Error(std::string(kGeneratePrompt),
                  "expected a prompt: this tokenizer has no BOS token to start from");
    prompt = {tokenizer.bos_id()};
  }
  return prompt;
}

// The cache's bytes once the loop is done: its allocated slots and its filled ones.
void record_kv_bytes(const KvCacheManager& cache, GenerateResult& result) {
  result.kv_bytes_allocated =
      static_cast<long>(cache.allocated_slots() * cache.layout().bytes_per_token());
  result.kv_bytes_used = static_cast<long>(cache.filled_slots() * cache.layout().bytes_per_token());
}

// What generate()'s forward passes run against: the model, the sequence's cache and its hook.
struct SequenceRun {
  Transformer& transformer;
  KvCacheManager& cache;
  SeqId seq;
  SequenceCacheHook* hook;
  const MlaCodec* mla;
};

// The positions [first, end) that one engine step ran, and where their logits are.
struct Chunk {
  std::vector<StepToken> tokens;
  std::vector<int> row;  // per position of the chunk: its row of logits, or -1
  std::span<float> logits;
  int first = 0, end = 0;

  // Position pos's logits, or none when the chunk did not keep them.
  std::span<float> logits_of(int pos, std::size_t vocab) const {
    const int r = row[static_cast<std::size_t>(pos - first)];
    return r < 0 ? std::span<float>() : logits.subspan(static_cast<std::size_t>(r) * vocab, vocab);
  }
};

// Runs positions [pos, pos + n) in one engine step (their slots already appended), keeping the
// logits the loop will read. Returns the token greedy_step took, or -1 when it did not run.
int run_chunk(const SequenceRun& run, std::span<const int> prompt, int pos, int n, int token,
              bool greedy_only, bool score_tokens, Chunk& chunk) {
  int greedy = -1;
  chunk.first = pos;
  chunk.end = pos + n;
  chunk.row.assign(static_cast<std::size_t>(n), 0);
  if (n == 1 && greedy_only && pos >= static_cast<int>(prompt.size()) - 1) {
    const StepToken one{token, pos, sequence_view(run.cache, run.seq, run.hook, run.mla), true,
                        nullptr};
    greedy = run.transformer.greedy_step(std::span<const StepToken>(&one, 1))[0];
    chunk.row[0] = -1;
  } else if (n == 1) {
    chunk.logits = forward_one(run.transformer, run.cache, run.seq, run.hook, token, pos, run.mla);
  } else {
    chunk.tokens.clear();
    add_chunk(chunk.tokens, sequence_view(run.cache, run.seq, run.hook, run.mla), pos,
              prompt.subspan(static_cast<std::size_t>(pos), static_cast<std::size_t>(n)), pos);
    int rows = 0;
    for (int i = 0; i < n; ++i) {
      const bool wanted = score_tokens || pos + i == static_cast<int>(prompt.size()) - 1;
      chunk.row[static_cast<std::size_t>(i)] = wanted ? rows++ : -1;
      chunk.tokens[static_cast<std::size_t>(i)].want_logits = wanted;
    }
    chunk.logits = run.transformer.forward_step(chunk.tokens);
  }
  return greedy;
}

}  // namespace

void validate(const GenerateOptions& options, const ModelConfig& model) {
  check_steps(model, options.steps, options.past_context);
  if (options.cache_hook != nullptr && options.allocator != AllocatorKind::kPaged) {
    throw Error(std::string(kGenerateAllocator),
                "expected paged with token eviction, got contiguous");
  }
}

std::vector<int> generate_tokens(Transformer& transformer, const std::vector<int>& prompt_tokens,
                                 int steps, const GenerateOptions& options,
                                 std::vector<std::vector<float>>* logits_out) {
  const ModelConfig& c = transformer.config();
  check_steps(c, steps, options.past_context);
  KvCacheManager cache = make_cache(c, options, steps);
  const SeqId seq(0);
  cache.require_add_sequence(seq);
  SequenceCacheHook* hook = options.cache_hook;
  if (hook != nullptr) hook->begin(cache, seq, transformer.backend());
  Sampler sampler(options.sampler);
  std::vector<int> tokens = {options.start_token};
  int token = options.start_token;
  for (int pos = 0; pos < steps; ++pos) {
    cache.require_append_slots(seq, 1);
    std::span<float> logits = forward_one(transformer, cache, seq, hook, token, pos, options.mla);
    if (logits_out != nullptr) logits_out->emplace_back(logits.begin(), logits.end());
    int next = pos < static_cast<int>(prompt_tokens.size())
                   ? prompt_tokens[static_cast<std::size_t>(pos)]
                   : sampler.sample(logits);
    if (hook != nullptr) hook->after_token();
    if (options.stop_at_bos && next == options.start_token) break;
    tokens.push_back(next);
    token = next;
  }
  return tokens;
}

GenerateResult generate(Transformer& transformer, const Tokenizer& tokenizer,
                        const GenerateOptions& options,
                        const std::function<void(const std::string&)>& on_piece) {
  const ModelConfig& c = transformer.config();
  validate(options, c);
  GenerateResult result;
  const std::vector<int> prompt = encode_prompt(tokenizer, options.prompt);
  result.num_prompt_tokens = static_cast<int>(prompt.size());
  KvCacheManager cache = make_cache(c, options, options.steps);
  const SeqId seq(0);
  cache.require_add_sequence(seq);
  if (options.cache_hook != nullptr) options.cache_hook->begin(cache, seq, transformer.backend());
  Sampler sampler(options.sampler);
  SequenceCacheHook* hook = options.cache_hook;
  const auto block_bytes = static_cast<long>(cache.layout().block_bytes());
  // log softmax of each step's logits, taken before the sampler rewrites them in place.
  std::vector<float> log_p(options.score_tokens ? static_cast<std::size_t>(c.vocab_size) : 0);

  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Clock::time_point prefilled = start;  // when the last prompt position's forward was done
  int token = prompt[0];
  result.tokens.push_back(token);
  // A prompt that does not start with BOS starts with text: echo it too (run.c's never does).
  if (options.echo_prompt && token != tokenizer.bos_id()) on_piece(tokenizer.decode(-1, token));
  // The prompt's positions (whose input tokens are known) run kDefaultStepTokens per engine step,
  // the weights read once per chunk; the sampled ones, and every one under a cache hook (token
  // eviction acts between tokens), one per step. A chunk keeps the logits only where they are
  // used: the last prompt position (the first sample) and, when scoring, every position.
  const int known = std::min(static_cast<int>(prompt.size()), options.steps);
  const auto vocab = static_cast<std::size_t>(c.vocab_size);
  const SequenceRun run{transformer, cache, seq, hook, options.mla};
  Chunk chunk;
  // Greedy decoding that nothing else reads the logits of takes the token from the backend
  // (Transformer::greedy_step: on the CUDA backend the argmax runs on the device).
  const bool greedy_only =
      options.sampler.temperature == 0.0f && !options.score_tokens && hook == nullptr;
  for (int pos = 0; pos < options.steps; ++pos) {
    int greedy = -1;  // the token greedy_step took, when it ran this position
    if (pos >= chunk.end) {
      const int n = hook == nullptr ? std::clamp(known - pos, 1, kDefaultStepTokens) : 1;
      cache.require_append_slots(seq, n);
      result.peak_kv_bytes = std::max(result.peak_kv_bytes, cache.pool().num_used() * block_bytes);
      greedy = run_chunk(run, prompt, pos, n, token, greedy_only, options.score_tokens, chunk);
      if (chunk.first < known && chunk.end >= known) prefilled = Clock::now();
    }
    result.positions_run = pos + 1;
    const std::span<float> logits = chunk.logits_of(pos, vocab);
    if (options.score_tokens) log_softmax(std::span<const float>(logits), std::span<float>(log_p));
    int next;
    const bool forced = pos < static_cast<int>(prompt.size()) - 1;
    if (forced) {
      next = prompt[static_cast<std::size_t>(pos) + 1];
    } else {
      next = greedy >= 0 ? greedy : sampler.sample(logits);
      ++result.num_generated;
    }
    if (options.score_tokens) result.next_logprob.push_back(log_p[static_cast<std::size_t>(next)]);
    if (hook != nullptr) hook->after_token();
    if (!forced && tokenizer.is_stop(next)) {  // a prompt may hold stop tokens (chat turns)
      if (options.stop_at_bos) break;
      on_piece("\n\n");  // a new story starts (BOS), as stories are concatenated in training
      result.tokens.push_back(next);
      token = next;
      continue;
    }
    std::string piece = tokenizer.decode(token, next);
    if (tokenizer.is_printable(piece) && (options.echo_prompt || !forced)) on_piece(piece);
    result.tokens.push_back(next);
    token = next;
  }
  result.prefill_positions = known;
  result.prefill_seconds = std::chrono::duration<double>(prefilled - start).count();
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - prefilled).count();
  record_kv_bytes(cache, result);
  return result;
}

}  // namespace kvscope

// The generation loop.
#include "engine/model/generate.h"

#include <chrono>

#include "engine/common/error.h"
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

void check_steps(const ModelConfig& c, int steps) {
  if (steps < 1 || steps > c.seq_len) {
    fail_expected("--steps", "an integer in [1, " + std::to_string(c.seq_len) +
                                 "] (the model's seq_len)", std::to_string(steps));
  }
}

}  // namespace

std::vector<int> generate_tokens(Transformer& transformer, const std::vector<int>& prompt_tokens,
                                 int steps, const GenerateOptions& options,
                                 std::vector<std::vector<float>>* logits_out) {
  const ModelConfig& c = transformer.config();
  check_steps(c, steps);
  KvCacheManager cache = make_cache(c, options, steps);
  const SeqId seq(0);
  cache.add_sequence(seq);
  Sampler sampler(options.sampler);
  std::vector<int> tokens = {kTokenBos};
  int token = kTokenBos;
  for (int pos = 0; pos < steps; ++pos) {
    cache.append_slots(seq, 1);
    KvSeqView view = cache.view(seq);
    view.mla = options.mla;
    std::span<float> logits = transformer.forward(token, pos, view);
    if (logits_out != nullptr) logits_out->emplace_back(logits.begin(), logits.end());
    int next = pos < static_cast<int>(prompt_tokens.size()) ? prompt_tokens[static_cast<std::size_t>(pos)]
                                                            : sampler.sample(logits);
    if (next == kTokenBos) break;
    tokens.push_back(next);
    token = next;
  }
  return tokens;
}

GenerateResult generate(Transformer& transformer, const Tokenizer& tokenizer,
                        const GenerateOptions& options,
                        const std::function<void(const std::string&)>& on_piece) {
  const ModelConfig& c = transformer.config();
  check_steps(c, options.steps);
  GenerateResult result;
  std::vector<int> prompt = tokenizer.encode(options.prompt, /*bos=*/true, /*eos=*/false);
  result.num_prompt_tokens = static_cast<int>(prompt.size());
  KvCacheManager cache = make_cache(c, options, options.steps);
  const SeqId seq(0);
  cache.add_sequence(seq);
  Sampler sampler(options.sampler);

  using Clock = std::chrono::steady_clock;
  Clock::time_point start{};
  bool started = false;
  int token = prompt[0];
  result.tokens.push_back(token);
  for (int pos = 0; pos < options.steps; ++pos) {
    cache.append_slots(seq, 1);
    KvSeqView view = cache.view(seq);
    view.mla = options.mla;
    std::span<float> logits = transformer.forward(token, pos, view);
    int next;
    if (pos < static_cast<int>(prompt.size()) - 1) {
      next = prompt[static_cast<std::size_t>(pos) + 1];
    } else {
      next = sampler.sample(logits);
      ++result.num_generated;
    }
    if (next == kTokenBos) break;
    std::string piece = tokenizer.decode(token, next);
    if (is_printable_piece(piece)) on_piece(piece);
    result.tokens.push_back(next);
    token = next;
    if (!started) {
      start = Clock::now();
      started = true;
    }
  }
  if (started) result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.kv_bytes_allocated = static_cast<long>(cache.allocated_slots() * cache.layout().bytes_per_token());
  result.kv_bytes_used = static_cast<long>(cache.filled_slots() * cache.layout().bytes_per_token());
  return result;
}

}  // namespace kvscope

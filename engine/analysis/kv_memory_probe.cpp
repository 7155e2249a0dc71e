#include "engine/analysis/kv_memory_probe.h"

#include <chrono>
#include <string>

#include "engine/analysis/memory_math.h"
#include "engine/common/error.h"
#include "engine/infer/step_runner.h"
#include "engine/kv/cache_manager.h"
#include "engine/kv/kv_storage.h"

namespace kvscope {

std::vector<int> probe_tokens(const Tokenizer* tokenizer, const std::string& text, int needed,
                              int vocab, const std::string& where, int* repeats) {
  std::vector<int> tokens;
  *repeats = 0;
  if (tokenizer == nullptr) {
    tokens.resize(static_cast<std::size_t>(needed));
    for (int i = 0; i < needed; ++i)
      tokens[static_cast<std::size_t>(i)] = static_cast<int>((i * 7919L + 13) % vocab);
    return tokens;
  }
  const std::vector<int> one = tokenizer->encode(text, /*bos=*/true, /*eos=*/false);
  if (one.size() < 2) throw Error(where, "expected a text of at least one token, got none");
  while (static_cast<int>(tokens.size()) < needed) {
    tokens.insert(tokens.end(), one.begin(), one.end());
    ++*repeats;
  }
  tokens.resize(static_cast<std::size_t>(needed));
  return tokens;
}

std::vector<KvMemoryPoint> measure_kv_memory(
    Transformer& t, std::span<const int> tokens, std::span<const int> contexts,
    const KvMemoryProbeOptions& options,
    const std::function<void(long done, long total)>& progress) {
  const ModelConfig& c = t.config();
  long total = 0;
  for (int ctx : contexts) {
    if (ctx < 1 || static_cast<std::size_t>(ctx) > tokens.size()) {
      throw Error("context " + std::to_string(ctx),
                  "expected 1 .. " + std::to_string(tokens.size()) + " tokens (the text's length)");
    }
    total += ctx;
  }
  const double formula_per_token =
      kv_bytes_per_token(c, payload_bytes_per_element(options.k_format.dtype)) / 2.0 +
      kv_bytes_per_token(c, payload_bytes_per_element(options.v_format.dtype)) / 2.0;
  std::vector<KvMemoryPoint> points;
  long done = 0;
  for (int ctx : contexts) {
    const int bs = options.block_size;
    const KvLayout layout =
        kv_layout_for(c, bs, (ctx + bs - 1) / bs, options.k_format, options.v_format);
    SoloSequence seq(layout, ctx);
    const auto started = std::chrono::steady_clock::now();
    // Only the cache is measured: no logits, and steps of 128 tokens (the matmuls' fixed costs
    // spread over more tokens); progress after each 512.
    constexpr int kStep = 128, kReport = 512;
    for (int first = 0; first < ctx; first += kReport) {
      const int n = std::min(kReport, ctx - first);
      seq.run(t, tokens.subspan(static_cast<std::size_t>(first), static_cast<std::size_t>(n)), {},
              kStep);
      if (progress && first + n < ctx) progress(done + first + n, total);
    }
    KvMemoryPoint p;
    p.tokens = ctx;
    p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    p.formula_bytes = formula_per_token * ctx;
    p.exact_bytes = layout.bytes_per_token() * ctx;
    p.blocks = static_cast<int>(seq.cache().table(SoloSequence::kSeq).blocks.size());
    p.allocated_bytes = static_cast<double>(p.blocks) * static_cast<double>(layout.block_bytes());
    p.pool_bytes = static_cast<double>(seq.cache().storage()->total_bytes());
    p.resident_bytes = seq.cache().storage()->resident_bytes();
    points.push_back(p);
    done += ctx;
    if (progress) progress(done, total);
  }
  return points;
}

}  // namespace kvscope

// Memory vs context, measured: one sequence of C tokens run through the real model into a paged
// pool sized for it, then its KV memory read three ways: the textbook formula, what the allocator
// handed out (blocks x block bytes) and the pages the operating system backs for the pool
// (mincore). The three agree up to the formats' scales, block rounding and page rounding, and each
// difference is reported rather than hidden (docs/concepts/memory.md).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/infer/transformer.h"
#include "engine/kv/kv_format.h"
#include "engine/model/tokenizer.h"

namespace kvscope {

struct KvMemoryPoint {
  int tokens = 0;
  double formula_bytes = 0;    // 2 x layers x kv_heads x head_dim x payload bytes x tokens
  double exact_bytes = 0;      // the pool's bytes per token (scales included) x tokens
  int blocks = 0;              // blocks the allocator handed to the sequence
  double allocated_bytes = 0;  // blocks x the bytes one block takes in every layer, K and V
  double pool_bytes = 0;       // the pool's tiles (sized for this context: = allocated)
  long resident_bytes = -1;    // the pool's pages the OS backs after the run (-1: unknown)
  double seconds = 0;          // running the C tokens
};

// Tokens to run: `text` encoded (BOS first) and repeated until there are `needed` (`repeats` says
// how many copies it took; what the tokens say does not change their bytes); without a tokenizer,
// fixed pseudo-random ids under `vocab`. Throws kvscope::Error (naming `where`) on a text that
// makes no token.
std::vector<int> probe_tokens(const Tokenizer* tokenizer, const std::string& text, int needed,
                              int vocab, const std::string& where, int* repeats);

struct KvMemoryProbeOptions {
  int block_size = 16;
  KvFormat k_format;
  KvFormat v_format;
};

// For each context C (ascending, each <= tokens.size()): a fresh pool of ceil(C / block_size)
// blocks, tokens[0, C) run through `t` in batched steps, then the point. `progress(done, total)`
// is called in tokens across all contexts. Throws kvscope::Error on a context outside
// [1, tokens.size()].
std::vector<KvMemoryPoint> measure_kv_memory(
    Transformer& t, std::span<const int> tokens, std::span<const int> contexts,
    const KvMemoryProbeOptions& options,
    const std::function<void(long done, long total)>& progress = nullptr);

}  // namespace kvscope

// CacheBlend (Yao et al., EuroSys 2025) on the real model. A context made of chunks whose K/V
// were each prefilled alone (as a RAG server caches retrieved documents) is reused by
// concatenation: each chunk's keys re-rotated to its place in the context, nothing recomputed
// ("plain reuse"), so no chunk's tokens ever attended to an earlier chunk. CacheBlend recomputes a
// few tokens: every context token runs the first layers (through the check layer) over the
// reused cache, the `count` tokens whose K/V there deviate most from the reused ones are chosen,
// and only they run the later layers, each writing its K/V over the reused one. The rest of the
// cache is reused. The continuation after the context is then scored against a full prefill of
// the same context.
//
// Recomputing 0% is plain reuse (nothing runs); 100% runs every token through every layer over
// the same cache, which is the full prefill, bit for bit (tests/analysis/cache_blend_test.cpp).
// Runs on the host through the transformer backend's ops (HostStep). evaluate_blend's pool is
// fp32; the view-based functions below serve any pool without KIVI's staging (the Simulator's).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/analysis/quality.h"
#include "engine/backend/host_step.h"
#include "engine/infer/step_runner.h"

namespace kvscope {

struct BlendOptions {
  int chunks = 4;
  // The layer whose K/V deviation chooses the tokens to recompute: every token runs layers
  // 0..check_layer, the chosen ones the rest. Layer 0's K/V depend on nothing but the token and
  // its position, so they deviate only by the re-rotation's rounding; layer 1 is the first whose
  // K/V saw the other chunks (CacheBlend's reference implementation checks layer 1 too).
  int check_layer = 1;
  int block_size = 16;
};

// Throws kvscope::Error naming the setting when `o` cannot run on `c` with `context_tokens`
// tokens of context (chunks of at least one token; a check layer with a layer after it).
void validate(const BlendOptions& o, const ModelConfig& c, int context_tokens);

// The settings' rules, for every caller that takes them (validate, the Simulator's check_blend,
// `eval blend`'s flags): a check layer with a layer after it, and a percentage in [0, 100]. Each
// throws kvscope::Error at `where`.
void check_blend_layer(int check_layer, const ModelConfig& c, const std::string& where);
void check_blend_percent(int percent, const std::string& where);

// Where each chunk starts in a context of `context_tokens`: `chunks` near-equal chunks, the
// first ones a token longer; [chunks] ascending, the first 0.
std::vector<int> chunk_starts(int context_tokens, int chunks);

// Tokens recomputed at `percent` of a context: percent x tokens / 100, rounded to nearest.
int recompute_count(int context_tokens, int percent);

// The `count` indices of the largest deviations (among equals, the earlier), ascending.
std::vector<int> pick_largest(std::span<const double> deviation, int count);

// The reused cache of one context: `seq` (empty, room for the context) gets every chunk prefilled
// alone in place, at RoPE positions from 0 and attending only to its own chunk's slots, then its
// keys re-rotated to their positions in the context (Backend::rotate_keys).
void prefill_chunks_alone(Transformer& t, SoloSequence& seq, std::span<const int> context,
                          std::span<const int> starts);

// The full prefill of `context` into `seq` (empty), as the engine prefills a prompt: one
// forward_step (sub-steps of Transformer::kMaxStepTokens).
void prefill_full(Transformer& t, SoloSequence& seq, std::span<const int> context);

// What one selective recompute did.
struct BlendPass {
  std::vector<double> deviation;  // [context]: squared L2 of K and V at the check layer
  std::vector<int> recomputed;    // context positions run past the check layer, ascending
};

// CacheBlend's pass over `seq`, which holds the reused cache of `context` (its slots
// [0, context)): every token through the check layer, then the `count` with the largest
// deviation through the rest.
BlendPass blend_recompute(Transformer& t, HostStep& step, SoloSequence& seq,
                          std::span<const int> context, int check_layer, int count);

// The same on a sequence's view (the Simulator's requests, engine/sched), the view holding the
// context's slots [0, context) in `storage`: the chunks prefilled alone into their slots (not yet
// re-rotated); their keys re-rotated into place; CacheBlend's pass.
void prefill_chunks_in_place(Transformer& t, const KvSeqView& view, std::span<const int> context,
                             std::span<const int> starts);
void rotate_chunks_into_place(Transformer& t, KvStorage& storage, const KvSeqView& view,
                              std::span<const int> starts, int context_tokens);
BlendPass blend_recompute_in(Transformer& t, HostStep& step, const KvSeqView& view,
                             std::span<const int> context, int check_layer, int count);

// One window: the context whose cache is reused and the continuation scored after it.
struct BlendSample {
  std::vector<int> context;
  std::vector<int> continuation;
};

// One way of preparing the context, over every sample.
struct BlendRow {
  enum class Method { kReuse, kBlend, kFull };
  Method method = Method::kBlend;
  int recompute_percent = 0;
  long context_tokens = 0;
  long tokens_recomputed = 0;  // run past the check layer
  // The prefill's work as token-layers run (a full prefill runs context x layers), and the time
  // it took: the recompute pass (with its deviation check) or the full prefill, and the
  // re-rotation of the reused keys. The chunks' own prefills are not counted: they were cached.
  long token_layers = 0;
  double prefill_seconds = 0.0;
  // Recomputed tokens in each chunk (summed over samples): where CacheBlend spends its budget.
  std::vector<long> recomputed_per_chunk;
  QualityAccumulator quality;  // the continuation's predictions against the full prefill's
};
std::string blend_method_name(BlendRow::Method m);

struct BlendReport {
  BlendOptions options;
  int samples = 0;
  long full_token_layers = 0;        // context x layers, summed over samples
  double chunk_prefill_seconds = 0;  // the chunks prefilled alone (once: they are cached)
  // One row per requested percentage, in order (0 is plain reuse), then the full prefill.
  std::vector<BlendRow> rows;
  // The first sample's chunk starts and, per row, its recomputed positions: what a picture of
  // one context shows.
  std::vector<int> first_starts;
  std::vector<std::vector<int>> first_recomputed;
};

// Runs every sample: the full prefill (the reference), the chunks alone, then each percentage
// on a copy of the reused cache, and scores the continuation of each against the reference.
// progress(done, total) counts rows of samples.
BlendReport evaluate_blend(Transformer& t, std::span<const BlendSample> samples,
                           const BlendOptions& options, std::span<const int> percents,
                           const ProgressFn& progress = {});

}  // namespace kvscope

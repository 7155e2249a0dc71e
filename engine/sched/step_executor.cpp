// StepExecutor: the batched forward of a step's plan and sampling.
#include "engine/sched/step_executor.h"

#include <algorithm>
#include <string>

#include "engine/analysis/cache_blend.h"
#include "engine/common/error.h"
#include "engine/evict/eviction_hook.h"

namespace kvscope {

StepExecutor::StepExecutor(const SimConfig& config, const SimModel& model, KvCacheManager& cache,
                           EventSink* events, const int* step, int num_requests)
    : config_(config), model_(model), cache_(cache), events_(events), step_(step) {
  if (model_.weights != nullptr) {
    backend_ = config_.make_backend ? config_.make_backend() : make_cpu_backend(config_.threads);
    if (backend_ == nullptr)
      throw InternalError("simulator", "SimConfig::make_backend gave no backend");
    transformer_ = std::make_unique<Transformer>(model_.weights, *backend_);
    if (config_.blend && backend_->name() != "cpu") {
      fail_expected("cache.blend", "the CPU backend (its recompute runs on host activations)",
                    backend_->name());
    }
    if (config_.sparse_attention) {
      const SparseOptions& o = *config_.sparse_attention;
      selector_ = std::make_unique<SparseSelector>(
          model_.config, o, selector_channels(model_.config, model_.weights->weights(), o),
          /*record=*/false);
    }
  }
  if (config_.evicts_tokens()) evictors_.resize(static_cast<std::size_t>(num_requests));
  if (config_.blend) blend_picks_.resize(static_cast<std::size_t>(num_requests));
}

void StepExecutor::on_blend(const RequestRun& r, int tokens) {
  if (!transformer_ || !config_.blend) return;
  const std::span<const int> context(r.tokens.data(), static_cast<std::size_t>(tokens));
  std::vector<int> starts;
  int at = 0;
  for (const int n : r.spec.blend_chunks) {
    starts.push_back(at);
    at += n;
  }
  if (at != tokens) {
    throw InternalError("simulator", "request " + std::to_string(r.id) + " blends " +
                                         std::to_string(tokens) + " tokens, its chunks hold " +
                                         std::to_string(at));
  }
  const KvSeqView view = cache_.view(SeqId(r.id));
  prefill_chunks_in_place(*transformer_, view, context, starts);
  rotate_chunks_into_place(*transformer_, *cache_.storage(), view, starts, tokens);
  std::vector<int>& picks = blend_picks_[static_cast<std::size_t>(r.id)];
  picks.clear();
  const int count = recompute_count(tokens, config_.blend->recompute_percent);
  if (count == 0) return;  // plain reuse
  if (!blend_step_) blend_step_ = std::make_unique<HostStep>();
  picks = blend_recompute_in(*transformer_, *blend_step_, view, context, config_.blend->check_layer,
                             count)
              .recomputed;
}

void StepExecutor::on_kv_in(const RequestRun& r, int from, int to) {
  if (!transformer_) return;
  if (!kv_source_) {
    throw InternalError("simulator", "request " + std::to_string(r.id) + " takes " +
                                         std::to_string(to - from) +
                                         " tokens of K/V from elsewhere but there is no source");
  }
  const std::vector<BlockId>& table = cache_.table(SeqId(r.id)).blocks;
  const auto first = static_cast<std::size_t>(from / config_.block_size);
  const auto end = static_cast<std::size_t>(cache_.blocks_for(to));
  kv_source_(r, from, to, *cache_.storage(),
             std::span<const BlockId>(table).subspan(first, end - first));
}

const std::vector<int>& StepExecutor::blend_recomputed(int id) const {
  static const std::vector<int> none;
  if (id < 0 || static_cast<std::size_t>(id) >= blend_picks_.size()) return none;
  return blend_picks_[static_cast<std::size_t>(id)];
}

StepExecutor::~StepExecutor() = default;

std::vector<StepExecutor::NextToken> StepExecutor::forward(
    const StepPlan& plan, const std::vector<RequestRun>& requests) {
  std::vector<StepToken> step;
  for (const StepPlan::Entry& entry : plan.entries) {
    const RequestRun& r = requests[static_cast<std::size_t>(entry.id)];
    KvSeqView view = cache_.view(SeqId(r.id));
    view.mla = config_.mla.get();
    view.selector = selector_.get();
    // Token pos writes slot pos and attends to everything up to it.
    add_chunk(step, view, r.num_computed,
              std::span<const int>(r.tokens).subspan(static_cast<std::size_t>(r.num_computed),
                                                     static_cast<std::size_t>(entry.tokens)),
              r.num_computed);
    // Logits only where they are used: the last token of a sequence's known tokens (a prefill
    // chunk that does not finish the prompt samples nothing).
    if (entry.tokens > 0)
      step.back().want_logits = r.num_computed + entry.tokens == static_cast<int>(r.tokens.size());
  }
  const bool greedy = config_.sampler.temperature == 0.0f && !logits_observer_;
  std::span<const float> all;
  std::span<const int> tokens;
  if (greedy) {
    tokens = transformer_->greedy_step(step);
  } else {
    all = transformer_->forward_step(step);
  }
  std::vector<NextToken> next;
  const auto vocab = static_cast<std::size_t>(transformer_->config().vocab_size);
  std::size_t row = 0;
  for (const StepPlan::Entry& entry : plan.entries) {
    const RequestRun& r = requests[static_cast<std::size_t>(entry.id)];
    const bool wanted =
        entry.tokens > 0 && r.num_computed + entry.tokens == static_cast<int>(r.tokens.size());
    NextToken n;
    if (wanted && greedy) n.greedy = tokens[row++];
    if (wanted && !greedy) n.logits = all.subspan(row++ * vocab, vocab);
    next.push_back(n);
  }
  return next;
}

int StepExecutor::choose(const RequestRun& r, NextToken from) {
  if (!transformer_) return 0;
  if (from.greedy >= 0) return from.greedy;
  const std::span<const float> logits = from.logits;
  if (logits_observer_) logits_observer_(r.id, r.generated, logits);
  // One sampler per (request, token index): seeded choices do not depend on batching or
  // preemption, so a request samples the same tokens alone or in any batch. Forked samples
  // share the logits, so each samples from its own copy.
  std::vector<float> scratch(logits.begin(), logits.end());
  Sampler sampler(SamplerConfig{config_.sampler.temperature, config_.sampler.top_p,
                                config_.sampler.seed + static_cast<std::uint64_t>(r.id) * 7919u +
                                    static_cast<std::uint64_t>(r.generated)});
  return sampler.sample(scratch);
}

bool StepExecutor::is_stop(int token) const {
  return transformer_ && std::find(config_.stop_tokens.begin(), config_.stop_tokens.end(), token) !=
                             config_.stop_tokens.end();
}

}  // namespace kvscope

// Simulator: construction, the step loop, execution through the model, retirement and metrics.
#include "engine/sched/simulator.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <string>

#include "engine/analysis/pool_metrics.h"
#include "engine/common/error.h"
#include "engine/evict/eviction_hook.h"
#include "engine/model/tokenizer.h"
#include "engine/model/tokenizer_text.h"

namespace kvscope {
namespace {

KvLayout layout_for(const SimConfig& c, const ModelConfig& m) {
  if (c.mla) return mla_layout_for(m, *c.mla, c.block_size, c.num_blocks, c.k_format);
  return kv_layout_for(m, c.block_size, c.num_blocks, c.k_format, c.v_format);
}

void validate(const SimConfig& c, const std::vector<SimRequest>& requests, const ModelConfig& m) {
  if (c.block_size < 1 || c.block_size > 4096)
    fail_expected("cache.block_size", "an integer in [1, 4096]", std::to_string(c.block_size));
  if (c.num_blocks < 1)
    fail_expected("cache.num_blocks", "a positive integer", std::to_string(c.num_blocks));
  require_paged_for_prefix_caching(c.prefix_caching, c.allocator, "cache.prefix_caching");
  require_prefix_caching_for_tiers(!c.tiers.empty(), c.prefix_caching, "cache.tiers");
  if (c.host_blocks < 0)
    fail_expected("cache.host_blocks", "a non-negative integer", std::to_string(c.host_blocks));
  if (c.mla && c.token_eviction.policy.kind != EvictionKind::kNone) {
    fail_expected("cache.mla", "no token eviction beside the MLA latent cache (not supported)",
                  "rank " + std::to_string(c.mla->rank()) + " with token eviction " +
                      eviction_kind_name(c.token_eviction.policy.kind));
  }
  if (c.max_tokens_per_step < 0)
    fail_expected("max_tokens_per_step", "a non-negative integer",
                  std::to_string(c.max_tokens_per_step));
  if (c.max_running < 0)
    fail_expected("max_running", "a non-negative integer", std::to_string(c.max_running));
  if (c.max_seq_len < 0 || c.max_seq_len > m.seq_len) {
    fail_expected("cache.max_seq_len",
                  "an integer in [0, " + std::to_string(m.seq_len) + "] (0 = model context)",
                  std::to_string(c.max_seq_len));
  }
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const SimRequest& r = requests[i];
    const std::string where = "requests[" + std::to_string(i) + "]";
    if (r.arrival_step < 0)
      fail_expected(where + ".arrival_step", "an integer >= 0", std::to_string(r.arrival_step));
    if (r.n_samples < 1 || r.n_samples > 256)
      fail_expected(where + ".n", "an integer in [1, 256]", std::to_string(r.n_samples));
    if (r.max_new_tokens < 1)
      fail_expected(where + ".max_new_tokens", "an integer >= 1", std::to_string(r.max_new_tokens));
    if (r.prompt_tokens.empty())
      fail_expected(where + ".prompt_tokens", "at least one token", "an empty prompt");
    for (std::size_t j = 0; j < r.prompt_tokens.size(); ++j) {
      const int t = r.prompt_tokens[j];
      if (t < 0 || t >= m.vocab_size) {
        fail_expected(where + ".prompt_tokens[" + std::to_string(j) + "]",
                      "a token id in [0, " + std::to_string(m.vocab_size) + ")", std::to_string(t));
      }
    }
  }
}

}  // namespace

Simulator::Simulator(SimConfig config, SimModel model, std::vector<SimRequest> requests)
    : config_(std::move(config)), model_(std::move(model)) {
  const ModelConfig& m = model_.config;
  validate(config_, requests, m);
  context_ = m.seq_len;
  reservation_ = config_.max_seq_len > 0 ? config_.max_seq_len : context_;
  const bool compute = model_.weights != nullptr;
  const KvLayout layout = layout_for(config_, m);
  cache_ = std::make_unique<KvCacheManager>(layout, config_.allocator, reservation_, compute);
  if (config_.allocator == AllocatorKind::kContiguous &&
      cache_->blocks_for(reservation_) > config_.num_blocks) {
    throw Error("cache", "the contiguous allocator reserves " + std::to_string(reservation_) +
                             " tokens (" + std::to_string(cache_->blocks_for(reservation_)) +
                             " blocks) per request but the pool has " +
                             std::to_string(config_.num_blocks) +
                             " blocks; lower cache.max_seq_len or add blocks");
  }
  host_ = std::make_unique<HostKvTier>(layout, config_.host_blocks, compute);
  if (compute) {
    backend_ = config_.make_backend ? config_.make_backend() : make_cpu_backend(config_.threads);
    if (backend_ == nullptr)
      throw InternalError("simulator", "SimConfig::make_backend gave no backend");
    transformer_ = std::make_unique<Transformer>(model_.weights, *backend_);
  }
  TimelineHeader h;
  h.num_blocks = config_.num_blocks;
  h.block_size = config_.block_size;
  h.title = config_.title;
  h.allocator = allocator_name(config_.allocator);
  h.kv_format = config_.k_format == config_.v_format
                    ? config_.k_format.name()
                    : "k=" + config_.k_format.name() + ",v=" + config_.v_format.name();
  h.kv_bytes_per_token = layout.bytes_per_token();
  h.random_weights = model_.weights != nullptr && model_.weights->is_random_weights();
  // Bookkeeping runs sample no tokens (every id is 0): their text would be made up.
  if (config_.tokenizer && model_.weights)
    h.text = std::make_shared<TokenizerText>(config_.tokenizer, sequence_prompts(requests));
  timeline_ = std::make_shared<Timeline>(std::move(h));
  cache_->set_event_sink(timeline_.get(), &step_);
  make_prefix_cache();
  check_token_eviction();

  // Parallel samples become consecutive ids; with prefix caching all but the first fork off it.
  for (SimRequest& spec : requests) {
    const auto lead = static_cast<std::int32_t>(requests_.size());
    for (int k = 0; k < spec.n_samples; ++k) {
      RequestRun r;
      r.id = static_cast<std::int32_t>(requests_.size());
      r.spec = spec;
      r.tokens = r.spec.prompt_tokens;
      if (k > 0 && prefix_) {
        r.fork_of = lead;
        requests_[static_cast<std::size_t>(lead)].fork_children.push_back(r.id);
      } else {
        arrival_order_.push_back(r.id);
      }
      requests_.push_back(std::move(r));
    }
  }
  if (evicts_tokens()) evictors_.resize(requests_.size());
  std::stable_sort(arrival_order_.begin(), arrival_order_.end(),
                   [&](std::int32_t a, std::int32_t b) {
                     return requests_[static_cast<std::size_t>(a)].spec.arrival_step <
                            requests_[static_cast<std::size_t>(b)].spec.arrival_step;
                   });
}

Simulator::~Simulator() {
  if (cache_) cache_->set_event_sink(nullptr, nullptr);
}

bool Simulator::done() const {
  return next_arrival_ == arrival_order_.size() && waiting_.empty() && running_.empty() &&
         swapped_.empty();
}

int Simulator::run(int max_steps) {
  int n = 0;
  while (step_ < max_steps && step()) ++n;
  return n;
}

bool Simulator::step() {
  if (done()) return false;
  Work w;
  w.budget = config_.max_tokens_per_step > 0 ? config_.max_tokens_per_step
                                             : std::numeric_limits<int>::max();
  if (prefix_) prefix_->set_step(step_);
  arrive();
  schedule(w);
  execute(w);
  close_step(w);
  ++step_;
  return true;
}

std::optional<RejectReason> Simulator::check_fits(RequestRun& r, int* blocks_needed) const {
  const int prompt = static_cast<int>(r.spec.prompt_tokens.size());
  const int kv_tokens = prompt + r.spec.max_new_tokens - 1;  // the last sampled token is never fed
  const bool contiguous = config_.allocator == AllocatorKind::kContiguous;
  *blocks_needed = contiguous        ? cache_->blocks_for(reservation_)
                   : evicts_tokens() ? blocks_bound_evicting(kv_tokens)
                                     : cache_->blocks_for(kv_tokens);
  // With token eviction a sequence may run past the model's trained context (the cache holds at
  // most the budget; positions beyond seq_len are out of distribution, see eviction.md).
  constexpr int kEvictingTokenCap = 1'000'000;
  const int limit = contiguous ? reservation_ : evicts_tokens() ? kEvictingTokenCap : context_;
  if (kv_tokens > limit) {
    r.reject_reason = "prompt " + std::to_string(prompt) + " + max_new_tokens " +
                      std::to_string(r.spec.max_new_tokens) + " needs " +
                      std::to_string(kv_tokens) + " KV slots, more than the " +
                      (contiguous        ? "per-request reservation of "
                       : evicts_tokens() ? "evicting-sequence cap of "
                                         : "model context of ") +
                      std::to_string(limit) + " tokens";
    return RejectReason::kLargerThanContext;
  }
  if (*blocks_needed > config_.num_blocks) {
    r.reject_reason = "needs " + std::to_string(*blocks_needed) + " blocks (" +
                      std::to_string(kv_tokens) + " tokens at block size " +
                      std::to_string(config_.block_size) +
                      (evicts_tokens() ? ", with token eviction at budget " +
                                             std::to_string(config_.token_eviction.policy.budget)
                                       : std::string()) +
                      ") but the whole pool has " + std::to_string(config_.num_blocks);
    return RejectReason::kLargerThanPool;
  }
  return std::nullopt;
}

void Simulator::arrive() {
  while (next_arrival_ < arrival_order_.size()) {
    RequestRun& r = requests_[static_cast<std::size_t>(arrival_order_[next_arrival_])];
    if (r.spec.arrival_step > step_) break;
    ++next_arrival_;
    r.arrived = true;
    emit(ev::RequestArrived{r.id, static_cast<std::int64_t>(r.spec.prompt_tokens.size()),
                            r.spec.max_new_tokens});
    int blocks = 0;
    if (auto reason = check_fits(r, &blocks)) {
      r.phase = RequestPhase::kRejected;
      ++num_rejected_;
      emit(ev::RequestRejected{r.id, *reason, blocks});
      continue;
    }
    r.phase = RequestPhase::kWaiting;
    waiting_.push_back(r.id);
    if (tiers_ && tiers_->prefetches())
      tiers_->prefetch(r.id, r.tokens, prefix_->probe(r.tokens).hit_blocks);
  }
}

std::vector<Simulator::NextToken> Simulator::forward_plan(const Work& w) {
  std::vector<StepToken> step;
  for (const Work::Entry& entry : w.plan) {
    const RequestRun& r = requests_[static_cast<std::size_t>(entry.id)];
    KvSeqView view = cache_->view(SeqId(r.id));
    view.mla = config_.mla.get();
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
  for (const Work::Entry& entry : w.plan) {
    const RequestRun& r = requests_[static_cast<std::size_t>(entry.id)];
    const bool wanted =
        entry.tokens > 0 && r.num_computed + entry.tokens == static_cast<int>(r.tokens.size());
    NextToken n;
    if (wanted && greedy) n.greedy = tokens[row++];
    if (wanted && !greedy) n.logits = all.subspan(row++ * vocab, vocab);
    next.push_back(n);
  }
  return next;
}

void Simulator::execute(Work& w) {
  // One batched forward for the whole step (token eviction runs per sequence: its evictor acts
  // between tokens). The bookkeeping below runs after it, entry by entry, as before.
  std::vector<NextToken> step_next;
  double forward_seconds = 0.0;
  if (transformer_ && !evicts_tokens()) {
    const auto start = std::chrono::steady_clock::now();
    step_next = forward_plan(w);
    forward_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  for (std::size_t e = 0; e < w.plan.size(); ++e) {
    const Work::Entry& entry = w.plan[e];
    RequestRun& r = requests_[static_cast<std::size_t>(entry.id)];
    const int first = r.num_computed;
    const int n = entry.tokens;
    const int prompt = static_cast<int>(r.spec.prompt_tokens.size());
    NextToken next;
    if (evicts_tokens()) {
      next.logits = forward_evicting(r, first, n);
    } else if (transformer_) {
      next = step_next[e];
    }
    // A decode step feeds just the newest sampled token; anything else is (re)prefill.
    const bool decode = n == 1 && first >= prompt &&
                        first + 1 == static_cast<int>(r.tokens.size()) && first >= r.high_water;
    tokens_recomputed_ += std::max(0, std::min(first + n, r.high_water) - first);
    r.num_computed += n;
    r.high_water = std::max(r.high_water, r.num_computed);
    if (decode) {
      w.decode_tokens += 1;
    } else {
      w.prefill_tokens += n;
      prefill_total_ += n;
      emit(ev::PrefillChunk{r.id, first, n});
    }
    cache_full_blocks(r);
    if (r.num_computed < static_cast<int>(r.tokens.size())) {  // prefill not done yet
      if (evicts_tokens()) sync_table_event(r);
      continue;
    }
    if (!r.forked && !r.fork_children.empty() && r.generated == 0) fork_samples(r, next);
    sample(r, next);
    if (evicts_tokens()) sync_table_event(r);
  }
  if (forward_seconds > 0.0 && w.decode_tokens == 0) {
    prefill_only_seconds_ += forward_seconds;
    prefill_only_tokens_ += w.prefill_tokens;
  }
}

void Simulator::sample(RequestRun& r, NextToken from) {
  int next = 0;
  if (transformer_ && from.greedy >= 0) {
    next = from.greedy;
  } else if (transformer_) {
    const std::span<const float> logits = from.logits;
    if (logits_observer_) logits_observer_(r.id, r.generated, logits);
    // One sampler per (request, token index): seeded choices do not depend on batching or
    // preemption, so a request samples the same tokens alone or in any batch. Forked samples
    // share the logits, so each samples from its own copy.
    std::vector<float> scratch(logits.begin(), logits.end());
    Sampler sampler(SamplerConfig{config_.sampler.temperature, config_.sampler.top_p,
                                  config_.sampler.seed + static_cast<std::uint64_t>(r.id) * 7919u +
                                      static_cast<std::uint64_t>(r.generated)});
    next = sampler.sample(scratch);
  }
  r.tokens.push_back(next);
  ++r.generated;
  emit(ev::DecodeToken{r.id, r.num_computed - 1, next});
  const bool stop =
      transformer_ && std::find(config_.stop_tokens.begin(), config_.stop_tokens.end(), next) !=
                          config_.stop_tokens.end();
  if (stop || r.generated >= r.spec.max_new_tokens) finish(r);
}

void Simulator::finish(RequestRun& r) {
  if (evicts_tokens()) evictors_[static_cast<std::size_t>(r.id)].reset();
  cache_->free_sequence(SeqId(r.id));
  running_.erase(std::find(running_.begin(), running_.end(), r.id));
  r.phase = RequestPhase::kFinished;
  r.finished_step = step_;
  ++num_finished_;
  emit(ev::RequestFinished{r.id, static_cast<std::int64_t>(r.spec.prompt_tokens.size()),
                           r.generated});
}

void Simulator::close_step(const Work& w) {
  StepMetrics m;
  fill_pool_metrics(*cache_, m);
  m.step = step_;
  m.requests_waiting = static_cast<std::int32_t>(waiting_.size());
  m.requests_running = static_cast<std::int32_t>(running_.size());
  m.requests_swapped = static_cast<std::int32_t>(swapped_.size());
  m.requests_finished = num_finished_;
  m.requests_rejected = num_rejected_;
  m.preemptions = preemptions_;
  m.tokens_recomputed = tokens_recomputed_;
  m.prefill_tokens = w.prefill_tokens;
  m.decode_tokens = w.decode_tokens;
  m.prompt_tokens = prompt_tokens_;
  m.prefix_hit_tokens = prefix_hit_tokens_;
  if (tiers_) tiers_->record_held();
  emit(ev::StepEnd{m.requests_running, m.requests_waiting});
  timeline_->end_step(m);
}

}  // namespace kvscope

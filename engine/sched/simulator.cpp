// Simulator: validation, wiring the parts, the step loop and the step's metrics.
#include "engine/sched/simulator.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "engine/analysis/pool_metrics.h"
#include "engine/common/error.h"
#include "engine/model/tokenizer.h"
#include "engine/model/tokenizer_text.h"

namespace kvscope {
namespace {

KvLayout layout_for(const SimConfig& c, const ModelConfig& m) {
  if (c.mla) return mla_layout_for(m, *c.mla, c.block_size, c.num_blocks, c.k_format);
  return kv_layout_for(m, c.block_size, c.num_blocks, c.k_format, c.v_format);
}

// A hybrid run's rules, each refusal naming what it is beside.
void check_layer_groups(const SimConfig& c, const ModelConfig& m, bool weights) {
  const std::string at = "cache.layer_groups";
  int layers = 0;
  for (const LayerGroupSpec& g : c.layer_groups) layers += g.layers;
  if (layers != m.n_layers) {
    fail_expected(at, "groups whose layers add up to the model's " + std::to_string(m.n_layers),
                  std::to_string(layers) + " layers");
  }
  const auto refuse = [&](bool bad, const std::string& what) {
    if (bad)
      fail_expected(at,
                    "the paged allocator, recompute preemption and none of " + what +
                        " beside hybrid layer groups (not modelled)",
                    what);
  };
  if (weights) {
    fail_expected(at,
                  "a bookkeeping run (model.bookkeeping: the engine's models are all full "
                  "attention, so hybrid groups are block accounting only)",
                  "a model with weights");
  }
  refuse(c.allocator != AllocatorKind::kPaged, "the contiguous allocator");
  refuse(c.prefix_caching, "prefix caching");
  refuse(c.preemption != PreemptionMode::kRecompute, "swap preemption");
  refuse(c.evicts_tokens(), "token eviction");
  refuse(c.mla != nullptr, "MLA");
  refuse(c.blend.has_value(), "CacheBlend");
  refuse(c.sparse_attention.has_value(), "sparse attention");
  refuse(c.host_blocks > 0, "host blocks");
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
  if (c.mla && c.evicts_tokens()) {
    fail_expected("cache.mla", "no token eviction beside the MLA latent cache (not supported)",
                  "rank " + std::to_string(c.mla->rank()) + " with token eviction " +
                      eviction_kind_name(c.token_eviction.policy.kind));
  }
  if (c.sparse_attention) {
    check_sparse_attention(*c.sparse_attention, c.mla != nullptr, c.evicts_tokens(), m,
                           c.block_size, "cache.sparse_attention");
  }
  if (c.blend) check_blend(c, m, "cache.blend");
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
    if (!r.blend_chunks.empty()) {
      long total = 0;
      for (const int n : r.blend_chunks) {
        if (n < 1) fail_expected(where + ".chunks", "chunks of at least one token", "an empty one");
        total += n;
      }
      if (total >= static_cast<long>(r.prompt_tokens.size())) {
        fail_expected(where + ".chunks", "chunks shorter than the prompt (a question follows them)",
                      std::to_string(total) + " of its " + std::to_string(r.prompt_tokens.size()) +
                          " tokens");
      }
      if (c.blend && r.n_samples != 1)
        fail_expected(where + ".n", "1 with chunks (CacheBlend)", std::to_string(r.n_samples));
    }
    if (r.kv_in_tokens < 0 || r.kv_in_tokens >= static_cast<int>(r.prompt_tokens.size())) {
      throw InternalError("simulator", where + " takes " + std::to_string(r.kv_in_tokens) +
                                           " tokens of K/V from elsewhere; its prompt has " +
                                           std::to_string(r.prompt_tokens.size()));
    }
    if ((r.kv_in_tokens > 0 || r.hold_blocks || r.external_arrival) &&
        (r.n_samples != 1 || !r.blend_chunks.empty() || c.evicts_tokens())) {
      throw InternalError("simulator", where +
                                           " is delivered, held or takes K/V from elsewhere beside "
                                           "parallel samples, chunks or token eviction: the "
                                           "disaggregated run refuses these");
    }
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
  if (config_.blend && model_.weights == nullptr) {
    fail_expected("cache.blend",
                  "a model with weights (a bookkeeping run computes no K/V to reuse)",
                  "no weights");
  }
  if (config_.sparse_attention && model_.weights == nullptr) {
    fail_expected("cache.sparse_attention",
                  "a model with weights (a bookkeeping run computes no attention to select in)",
                  "no weights");
  }
  const int reservation = config_.reservation(m.seq_len);
  const bool compute = model_.weights != nullptr;
  KvLayout layout = layout_for(config_, m);
  std::optional<LayerGroupPlan>& groups = layer_groups_;
  if (!config_.layer_groups.empty()) {
    check_layer_groups(config_, m, compute);
    groups = plan_layer_groups_for(config_.layer_groups, m, config_.k_format, config_.v_format,
                                   config_.block_size, "cache.layer_groups");
    if (groups->block_size != config_.block_size) {
      fail_expected("cache.block_size",
                    "at least " + std::to_string(groups->block_size) +
                        " tokens: a state page must fit one attention page (resolve_scenario "
                        "raises it)",
                    std::to_string(config_.block_size));
    }
    layout.n_layers = groups->group_size;  // a block is one page in each of a group's layers
  }
  cache_ = std::make_unique<KvCacheManager>(layout, config_.allocator, reservation, compute);
  if (groups) cache_->set_layer_groups(groups->groups);
  if (config_.allocator == AllocatorKind::kContiguous &&
      cache_->blocks_for(reservation) > config_.num_blocks) {
    throw Error("cache", "the contiguous allocator reserves " + std::to_string(reservation) +
                             " tokens (" + std::to_string(cache_->blocks_for(reservation)) +
                             " blocks) per request but the pool has " +
                             std::to_string(config_.num_blocks) +
                             " blocks; lower cache.max_seq_len or add blocks");
  }
  host_ = std::make_unique<HostKvTier>(layout, config_.host_blocks, compute);
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
  int num_runs = 0;
  for (const SimRequest& r : requests) num_runs += r.n_samples;
  executor_ =
      std::make_unique<StepExecutor>(config_, model_, *cache_, timeline_.get(), &step_, num_runs);
  cache_->set_event_sink(timeline_.get(), &step_);
  make_prefix_cache();
  executor_->check_token_eviction(prefix_.get());
  Scheduler::Parts parts;
  parts.cache = cache_.get();
  parts.prefix = prefix_.get();
  parts.tiers = tiers_.get();
  parts.swap = host_.get();
  parts.events = timeline_.get();
  parts.step = &step_;
  scheduler_ = std::make_unique<Scheduler>(config_, m.seq_len, parts, std::move(requests));
  scheduler_->set_listener(executor_.get());
}

Simulator::~Simulator() {
  if (cache_) cache_->set_event_sink(nullptr, nullptr);
}

void Simulator::make_prefix_cache() {
  if (!config_.prefix_caching) return;  // the paged allocator it needs: checked in validate()
  if (cache_->layout().staging_bytes_per_sequence() > 0) {
    throw Error("cache.prefix_caching",
                "is not supported with KV format " + timeline_->header().kv_format +
                    " (its open group stays in per-sequence full-precision staging); use another "
                    "kv_dtype or turn prefix caching off");
  }
  PrefixCacheConfig pc;
  pc.block_size = config_.block_size;
  pc.index = config_.prefix_index;
  pc.policy = config_.cached_block_eviction;
  prefix_ = std::make_unique<PrefixCache>(cache_->pool(), pc, timeline_.get());
  cache_->set_block_source(prefix_.get());
  if (config_.tiers.empty()) return;
  KvTiersOptions to;
  to.tiers = config_.tiers;
  to.block_size = config_.block_size;
  to.prefetch = config_.tier_prefetch;
  to.write_through = config_.tier_write_through;
  KvStorage* bytes = model_.weights != nullptr ? cache_->storage() : nullptr;
  tiers_ = std::make_unique<KvTiers>(std::move(to), bytes, cache_->layout().block_bytes(),
                                     timeline_.get(), &step_);
  prefix_->set_evict_observer(
      [this](BlockId b, std::uint64_t chain_key) { tiers_->on_evicted(b, chain_key); });
}

int Simulator::run(int max_steps) {
  int n = 0;
  while (step_ < max_steps && step()) ++n;
  return n;
}

bool Simulator::step() {
  if (done()) return false;
  if (prefix_) prefix_->set_step(step_);
  scheduler_->arrive();
  StepPlan plan = scheduler_->schedule();
  execute(plan);
  close_step(plan);
  last_plan_ = std::move(plan);
  ++step_;
  return true;
}

void Simulator::release(std::int32_t id) {
  scheduler_->release(id);
  if (tiers_) tiers_->record_held();
}

void Simulator::execute(StepPlan& plan) {
  // One batched forward for the whole step (token eviction runs per sequence: its evictor acts
  // between tokens). The bookkeeping below runs after it, entry by entry.
  std::vector<StepExecutor::NextToken> batched;
  double forward_seconds = 0.0;
  if (executor_->computes() && !evicts_tokens()) {
    const auto start = std::chrono::steady_clock::now();
    batched = executor_->forward(plan, scheduler_->requests());
    forward_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  for (std::size_t e = 0; e < plan.entries.size(); ++e) {
    const StepPlan::Entry& entry = plan.entries[e];
    RequestRun& r = scheduler_->request(entry.id);
    StepExecutor::NextToken next;
    if (evicts_tokens()) {
      next = executor_->forward_evicting(r, r.num_computed, entry.tokens);
    } else if (executor_->computes()) {
      next = batched[e];
    }
    const bool samples = scheduler_->record_computed(plan, entry);
    if (samples) {
      for (std::int32_t child : scheduler_->forks_due(r)) {
        scheduler_->fork(r, child);
        sample(scheduler_->request(child), next);
      }
      sample(r, next);
    }
    executor_->sync_table_event(r);
  }
  if (forward_seconds > 0.0 && plan.decode_tokens == 0) {
    prefill_only_seconds_ += forward_seconds;
    prefill_only_tokens_ += plan.prefill_tokens;
  }
}

void Simulator::sample(RequestRun& r, StepExecutor::NextToken from) {
  const int token = executor_->choose(r, from);
  scheduler_->append_token(r, token, executor_->is_stop(token));
}

void Simulator::close_step(const StepPlan& plan) {
  StepMetrics m;
  fill_pool_metrics(*cache_, m);
  m.step = step_;
  scheduler_->fill_metrics(m);
  m.prefill_tokens = plan.prefill_tokens;
  m.decode_tokens = plan.decode_tokens;
  if (tiers_) tiers_->record_held();
  timeline_->emit(to_event(ev::StepEnd{m.requests_running, m.requests_waiting}, step_));
  timeline_->end_step(m);
}

void Simulator::check_invariants() const {
  cache_->check_invariants();
  if (prefix_) prefix_->check_invariants();
  if (tiers_) tiers_->check_invariants();
  scheduler_->check_invariants();
  for (const RequestRun& r : scheduler_->requests())
    if (r.arrived) executor_->check_invariants(r);
}

}  // namespace kvscope

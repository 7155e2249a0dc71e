// EvictionVariant: teacher-forced runs through a paged cache with a TokenEvictor.
#include "engine/analysis/eviction_quality.h"

#include <algorithm>
#include <optional>

#include "engine/evict/attention_stats.h"
#include "engine/kv/cache_manager.h"

namespace kvscope {

std::string eviction_variant_name(const EvictorOptions& o) {
  const EvictionConfig& p = o.policy;
  std::string name = eviction_kind_name(p.kind);
  if (p.kind == EvictionKind::kNone) return name;
  // Appended piece by piece (GCC 12 warns falsely on chained operator+ of temporaries).
  if (p.kind == EvictionKind::kSinksWindow)
    name.append("(").append(std::to_string(p.sinks)).append(")");
  name.append(" B=").append(std::to_string(p.budget));
  if (o.compaction != CompactionPolicy::kNever) {
    name.append(" compact=").append(compaction_policy_name(o.compaction));
  }
  if (o.positions != PositionMode::kKeep) {
    name.append(" positions=").append(position_mode_name(o.positions));
  }
  return name;
}

std::vector<EvictionRunOptions> eviction_sweep_runs(int block_size, std::span<const int> budgets) {
  std::vector<EvictionRunOptions> out;
  const std::pair<EvictionKind, CompactionPolicy> series[] = {
      {EvictionKind::kWindow, CompactionPolicy::kNever},
      {EvictionKind::kH2O, CompactionPolicy::kNever},
      {EvictionKind::kH2O, CompactionPolicy::kAlways}};
  for (const auto& [kind, compaction] : series) {
    for (int budget : budgets) {
      EvictionRunOptions o;
      o.block_size = block_size;
      o.evictor.policy.kind = kind;
      o.evictor.policy.budget = budget;
      o.evictor.compaction = compaction;
      out.push_back(o);
    }
  }
  return out;
}

EvictionVariant::EvictionVariant(const EvictionRunOptions& options) : options_(options) {}

std::string EvictionVariant::name() const {
  return eviction_variant_name(options_.evictor);
}

CacheFootprint EvictionVariant::footprint(const ModelConfig& c) const {
  const KvLayout L = kv_layout_for(c, options_.block_size, 1, options_.k_format, options_.v_format);
  return {L.bytes_per_token(), 0.0};
}

namespace {

// Passes each attention row to up to two observers (the policy's statistics, a capture).
class FanOutObserver final : public AttentionObserver {
 public:
  FanOutObserver(AttentionObserver* a, AttentionObserver* b) : a_(a), b_(b) {}
  void on_attention(int layer, int head, int query_pos, std::span<const float> weights) override {
    if (a_ != nullptr) a_->on_attention(layer, head, query_pos, weights);
    if (b_ != nullptr) b_->on_attention(layer, head, query_pos, weights);
  }

 private:
  AttentionObserver* a_;
  AttentionObserver* b_;
};

// `cache` with sequence `seq` added: the evictor is built on a cache that holds its sequence.
KvCacheManager& with_sequence(KvCacheManager& cache, SeqId seq) {
  cache.require_add_sequence(seq);
  return cache;
}

}  // namespace

// One window through a paged cache with a TokenEvictor, a position at a time.
class EvictionStepper final : public VariantStepper {
 public:
  EvictionStepper(EvictionVariant& v, Transformer& t, const std::vector<int>& window)
      : EvictionStepper(v, t.config(), t.backend(), window) {}
  EvictionStepper(EvictionVariant& v, const ModelConfig& c, Backend& backend,
                  const std::vector<int>& window)
      : v_(v),
        window_(window),
        n_(static_cast<int>(window.size())),
        layout_(kv_layout_for(c, v.options_.block_size,
                              (n_ + v.options_.block_size - 1) / v.options_.block_size + 1,
                              v.options_.k_format, v.options_.v_format)),
        cache_(layout_, AllocatorKind::kPaged, n_, /*with_storage=*/true),
        evictor_(with_sequence(cache_, kSeq), kSeq, v.options_.evictor, c.rope_theta, backend),
        both_(nullptr, v.options_.capture) {
    const EvictionConfig& policy = v_.options_.evictor.policy;
    if (needs_attention(policy.kind)) {
      recorder_ =
          std::make_unique<AttentionRecorder>(AttentionShapeInfo{c.n_layers, c.n_heads, n_},
                                              /*full_matrix_limit=*/0, policy.observation_window);
      both_ = FanOutObserver(recorder_.get(), v.options_.capture);
    }
    one_shot_ = policy.kind == EvictionKind::kSnapKV && v_.options_.context > 0;
  }

  StepToken prepare(int pos) override {
    EvictionRunStats& stats = v_.stats_;
    cache_.require_append_slots(kSeq, 1);
    const int blocks = cache_.pool().num_used();
    window_peak_blocks_ = std::max(window_peak_blocks_, blocks);
    if (blocks > stats.peak_blocks) {
      stats.peak_blocks = blocks;
      stats.peak_kv_bytes = static_cast<std::size_t>(blocks) * layout_.block_bytes();
    }
    const KvSeqView view = evictor_.view();
    const int token_index = evictor_.slot_tokens().back();
    const int rope_pos = evictor_.slot_positions().back();
    v_.attended_sum_ += evictor_.num_live();
    ++stats.queries;
    if (recorder_) recorder_->set_slot_positions(evictor_.slot_tokens());
    AttentionObserver* observer = nullptr;
    if (v_.options_.capture != nullptr)
      v_.options_.capture->set_slot_positions(evictor_.slot_tokens());
    if (recorder_ || v_.options_.capture != nullptr) {
      observer_.emplace(both_, token_index);
      observer = &*observer_;
    }
    return StepToken{window_[static_cast<std::size_t>(pos)], rope_pos, view, true, observer};
  }

  void after(int pos) override {
    // Evict only after this position's logits exist: no policy sees a query before choosing.
    // Nothing to do after the window's last position.
    const int context = v_.options_.context;
    const bool prefilling = pos + 1 < context, last = pos + 1 == n_;
    if (!prefilling && !last && !(one_shot_ && pos + 1 > context))
      evictor_.after_token(recorder_.get());
  }

  void finish() override {
    EvictionRunStats& stats = v_.stats_;
    stats.window_peak_bytes_sum +=
        static_cast<double>(window_peak_blocks_) * static_cast<double>(layout_.block_bytes());
    stats.window_tokens += n_;
    const EvictorCounters& k = evictor_.counters();
    stats.tokens_evicted += k.tokens_evicted;
    stats.blocks_freed += k.blocks_freed;
    stats.slots_moved += k.slots_moved;
    stats.keys_rotated += k.keys_rotated;
    stats.mean_attended = v_.attended_sum_ / static_cast<double>(stats.queries);
    cache_.check_invariants();
  }

 private:
  static constexpr SeqId kSeq{0};
  EvictionVariant& v_;
  const std::vector<int>& window_;
  int n_;
  KvLayout layout_;
  KvCacheManager cache_;
  TokenEvictor evictor_;
  std::unique_ptr<AttentionRecorder> recorder_;
  FanOutObserver both_;                         // the recorder and the capture
  std::optional<TokenIndexObserver> observer_;  // both_, under the query's token index
  bool one_shot_ = false;
  int window_peak_blocks_ = 0;
};

std::unique_ptr<VariantStepper> EvictionVariant::stepper(Transformer& t,
                                                         const std::vector<int>& window) {
  return std::make_unique<EvictionStepper>(*this, t, window);
}

void EvictionVariant::run(Transformer& t, const std::vector<int>& window,
                          const std::function<void(int, std::span<const float>)>& on_logits) {
  EvictionStepper s(*this, t, window);
  run_stepper(s, t, window, on_logits);
}

}  // namespace kvscope

// EvictionVariant: teacher-forced runs through a paged cache with a TokenEvictor.
#include "engine/analysis/eviction_quality.h"

#include <algorithm>

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

}  // namespace

void EvictionVariant::run(Transformer& t, const std::vector<int>& window,
                          const std::function<void(int, std::span<const float>)>& on_logits) {
  const ModelConfig& c = t.config();
  const int n = static_cast<int>(window.size());
  const int bs = options_.block_size;
  const KvLayout layout =
      kv_layout_for(c, bs, (n + bs - 1) / bs + 1, options_.k_format, options_.v_format);
  KvCacheManager cache(layout, AllocatorKind::kPaged, n, /*with_storage=*/true);
  const SeqId seq(0);
  cache.require_add_sequence(seq);
  TokenEvictor evictor(cache, seq, options_.evictor, c.rope_theta);
  const EvictionConfig& policy = options_.evictor.policy;
  std::unique_ptr<AttentionRecorder> recorder;
  if (needs_attention(policy.kind)) {
    recorder =
        std::make_unique<AttentionRecorder>(AttentionShapeInfo{c.n_layers, c.n_heads, n},
                                            /*full_matrix_limit=*/0, policy.observation_window);
  }
  const bool one_shot = policy.kind == EvictionKind::kSnapKV && options_.context > 0;
  int window_peak_blocks = 0;
  for (int pos = 0; pos < n; ++pos) {
    cache.require_append_slots(seq, 1);
    const int blocks = cache.pool().num_used();
    window_peak_blocks = std::max(window_peak_blocks, blocks);
    if (blocks > stats_.peak_blocks) {
      stats_.peak_blocks = blocks;
      stats_.peak_kv_bytes = static_cast<std::size_t>(blocks) * layout.block_bytes();
    }
    const KvSeqView view = evictor.view();
    const int token_index = evictor.slot_tokens().back();
    const int rope_pos = evictor.slot_positions().back();
    attended_sum_ += evictor.num_live();
    ++stats_.queries;
    std::span<float> logits;
    if (recorder) recorder->set_slot_positions(evictor.slot_tokens());
    if (options_.capture != nullptr) options_.capture->set_slot_positions(evictor.slot_tokens());
    FanOutObserver both(recorder.get(), options_.capture);
    if (recorder || options_.capture != nullptr) {
      TokenIndexObserver observer(both, token_index);
      logits = t.forward(window[static_cast<std::size_t>(pos)], rope_pos, view, &observer);
    } else {
      logits = t.forward(window[static_cast<std::size_t>(pos)], rope_pos, view);
    }
    on_logits(pos, logits);
    // Evict only after this position's logits exist: no policy sees a query before choosing.
    // Nothing to do after the window's last position.
    const bool prefilling = pos + 1 < options_.context, last = pos + 1 == n;
    if (!prefilling && !last && !(one_shot && pos + 1 > options_.context)) {
      evictor.after_token(recorder.get());
    }
  }
  stats_.window_peak_bytes_sum +=
      static_cast<double>(window_peak_blocks) * static_cast<double>(layout.block_bytes());
  stats_.window_tokens += n;
  const EvictorCounters& k = evictor.counters();
  stats_.tokens_evicted += k.tokens_evicted;
  stats_.blocks_freed += k.blocks_freed;
  stats_.slots_moved += k.slots_moved;
  stats_.keys_rotated += k.keys_rotated;
  stats_.mean_attended = attended_sum_ / static_cast<double>(stats_.queries);
  cache.check_invariants();
}

}  // namespace kvscope

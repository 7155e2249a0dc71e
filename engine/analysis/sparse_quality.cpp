// SparseVariant: teacher-forced runs through a whole cache with a key selector on its views.
#include "engine/analysis/sparse_quality.h"

#include "engine/infer/step_runner.h"
#include "engine/kv/cache_manager.h"

namespace kvscope {

SparseCost sparse_cost(const SparseStats& s, const ModelConfig& c, double k_head_bytes,
                       double v_head_bytes, double k_elem_bytes) {
  SparseCost out;
  if (s.queries == 0) return out;
  const auto q = static_cast<double>(s.queries);
  const double heads = static_cast<double>(c.n_layers) * c.n_heads, hd = c.head_dim();
  out.keys_per_query = s.keys_attended / (q * heads);
  out.dense_keys_per_query = s.keys_dense / (q * heads);
  out.attention_macs = 2.0 * hd * s.keys_attended / q;
  out.indexer_macs = s.indexer_macs / q;
  out.dense_macs = 2.0 * hd * s.keys_dense / q;
  out.kv_bytes = s.keys_read * (k_head_bytes + v_head_bytes) / q;
  out.indexer_bytes = s.indexer_elems * k_elem_bytes / q;
  out.dense_kv_bytes = s.keys_dense_read * (k_head_bytes + v_head_bytes) / q;
  return out;
}

SparseVariant::SparseVariant(const SparseOptions& options, int block_size,
                             std::vector<std::vector<int>> channels, const KvFormat& k_format,
                             const KvFormat& v_format)
    : options_(options),
      block_size_(block_size),
      channels_(std::move(channels)),
      k_format_(k_format),
      v_format_(v_format) {}

KvLayout SparseVariant::layout(const ModelConfig& c) const {
  return kv_layout_for(c, block_size_, 1, k_format_, v_format_);
}

namespace {

// One head of one token's K or V in `f`, in bytes (scales included).
double head_bytes(const KvFormat& f, const ModelConfig& c, int block_size, KvKind kind) {
  return f.bytes_per_token(block_size, c.n_kv_heads, c.head_dim(), kind) / c.n_kv_heads;
}

}  // namespace

CacheFootprint SparseVariant::footprint(const ModelConfig& c) const {
  const KvLayout L = layout(c);
  double bytes = L.bytes_per_token();
  // The index is kept in the keys' format: its elements cost what a key's do.
  const double elem = head_bytes(k_format_, c, block_size_, KvKind::kKey) / c.head_dim();
  const double heads = static_cast<double>(c.n_layers) * c.n_kv_heads;
  if (options_.selector == SelectorKind::kQuest)
    bytes += heads * 2.0 * c.head_dim() * elem / block_size_;
  if (options_.selector == SelectorKind::kProxy) bytes += heads * options_.proxy_dims * elem;
  return {bytes, static_cast<double>(L.staging_bytes_per_sequence())};
}

SparseCost SparseVariant::cost(const ModelConfig& c) const {
  const double k = head_bytes(k_format_, c, block_size_, KvKind::kKey);
  const double v = head_bytes(v_format_, c, block_size_, KvKind::kValue);
  return sparse_cost(stats_, c, k, v, k / c.head_dim());
}

// One window through the whole cache, a position per engine step, each query's view carrying
// the selector.
class SparseStepper final : public VariantStepper {
 public:
  SparseStepper(SparseVariant& v, const ModelConfig& c, const std::vector<int>& window)
      : v_(v),
        window_(window),
        seq_(v.layout(c), static_cast<int>(window.size())),
        selector_(c, v.options_, v.channels_) {}

  StepToken prepare(int pos) override {
    KvSeqView view = seq_.append();
    selector_.begin_query(view.num_slots);
    view.selector = &selector_;
    return StepToken{window_[static_cast<std::size_t>(pos)], pos, view, true, v_.capture_};
  }
  void after(int /*pos*/) override { selector_.end_query(); }
  void finish() override {
    seq_.cache().check_invariants();
    v_.stats_ += selector_.stats();
  }

 private:
  SparseVariant& v_;
  const std::vector<int>& window_;
  SoloSequence seq_;
  SparseSelector selector_;
};

std::unique_ptr<VariantStepper> SparseVariant::stepper(Transformer& t,
                                                       const std::vector<int>& window) {
  return std::make_unique<SparseStepper>(*this, t.config(), window);
}

void SparseVariant::run(Transformer& t, const std::vector<int>& window,
                        const std::function<void(int, std::span<const float>)>& on_logits) {
  SparseStepper s(*this, t.config(), window);
  run_stepper(s, t, window, on_logits);
}

}  // namespace kvscope

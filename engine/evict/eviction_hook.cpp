// EvictingCacheHook implementation.
#include "engine/evict/eviction_hook.h"

#include "engine/common/error.h"

namespace kvscope {

EvictingCacheHook::EvictingCacheHook(const EvictorOptions& options, const ModelConfig& model,
                                     int max_tokens)
    : options_(options), rope_theta_(model.rope_theta) {
  if (needs_attention(options.policy.kind)) {
    recorder_ = std::make_unique<AttentionRecorder>(
        AttentionShapeInfo{model.n_layers, model.n_heads, max_tokens}, /*full_matrix_limit=*/0,
        options.policy.observation_window);
  }
}

void EvictingCacheHook::begin(KvCacheManager& cache, SeqId seq, Backend& backend) {
  evictor_ = std::make_unique<TokenEvictor>(cache, seq, options_, rope_theta_, backend);
}

KvSeqView EvictingCacheHook::view() {
  if (!evictor_) throw Error("token eviction", "view() before begin()");
  return evictor_->view();
}

int EvictingCacheHook::position() const {
  return evictor_->slot_positions().back();
}

AttentionObserver* EvictingCacheHook::observer() {
  if (!recorder_) return nullptr;
  recorder_->set_slot_positions(evictor_->slot_tokens());
  observer_.emplace(*recorder_, evictor_->slot_tokens().back());
  return &*observer_;
}

void EvictingCacheHook::after_token() {
  evictor_->after_token(recorder_.get());
}

}  // namespace kvscope

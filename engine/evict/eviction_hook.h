// EvictingCacheHook: token eviction during generation (`kvscope generate --evict`): a TokenEvictor
// behind the view, an AttentionRecorder when the policy reads attention, and a trim to the budget
// after every token.
#pragma once

#include <memory>
#include <optional>

#include "engine/evict/attention_stats.h"
#include "engine/evict/token_evictor.h"
#include "engine/infer/generate.h"

namespace kvscope {

class EvictingCacheHook final : public SequenceCacheHook {
 public:
  // `max_tokens`: the most tokens the sequence will reach (sizes the recorder).
  EvictingCacheHook(const EvictorOptions& options, const ModelConfig& model, int max_tokens);
  void begin(KvCacheManager& cache, SeqId seq, Backend& backend) override;
  KvSeqView view() override;
  int position() const override;
  AttentionObserver* observer() override;
  void after_token() override;
  const TokenEvictor& evictor() const { return *evictor_; }

 private:
  EvictorOptions options_;
  float rope_theta_;
  std::unique_ptr<AttentionRecorder> recorder_;
  std::unique_ptr<TokenEvictor> evictor_;
  std::optional<TokenIndexObserver> observer_;
};

}  // namespace kvscope

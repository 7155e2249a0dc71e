#include "engine/infer/step_runner.h"

#include <algorithm>
#include <string>
#include <vector>

#include "engine/common/error.h"

namespace kvscope {

namespace {

// run_tokens with the view of each step from view_of() (after the step's slots were appended).
void run_chunks(Transformer& t, KvCacheManager& cache, SeqId seq, std::span<const int> tokens,
                int first_pos, const std::function<KvSeqView()>& view_of,
                const std::function<void(int, std::span<const float>)>& on_logits,
                int step_tokens) {
  if (step_tokens < 1) {
    throw InternalError("run_tokens", "step_tokens " + std::to_string(step_tokens) + " < 1");
  }
  const auto vocab = static_cast<std::size_t>(t.config().vocab_size);
  const int n = static_cast<int>(tokens.size());
  std::vector<StepToken> step;
  for (int begin = 0; begin < n; begin += step_tokens) {
    const int count = std::min(step_tokens, n - begin);
    cache.require_append_slots(seq, count);
    const KvSeqView view = view_of();
    step.clear();
    add_chunk(step, view, view.num_slots - count,
              tokens.subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(count)),
              first_pos + begin, /*want_logits=*/static_cast<bool>(on_logits));
    const std::span<const float> logits = t.forward_step(step);
    if (!on_logits) continue;
    for (int i = 0; i < count; ++i) {
      on_logits(first_pos + begin + i, logits.subspan(static_cast<std::size_t>(i) * vocab, vocab));
    }
  }
}

}  // namespace

void run_tokens(Transformer& t, KvCacheManager& cache, SeqId seq, std::span<const int> tokens,
                int first_pos, const MlaCodec* mla,
                const std::function<void(int, std::span<const float>)>& on_logits,
                int step_tokens) {
  const auto view_of = [&] {
    KvSeqView view = cache.view(seq);
    view.mla = mla;
    return view;
  };
  run_chunks(t, cache, seq, tokens, first_pos, view_of, on_logits, step_tokens);
}

namespace {

KvLayout sized_for(KvLayout layout, int max_tokens) {
  if (max_tokens < 1 || layout.block_size < 1) {
    throw InternalError("SoloSequence", "max_tokens " + std::to_string(max_tokens) +
                                            ", block size " + std::to_string(layout.block_size));
  }
  layout.num_blocks = (max_tokens + layout.block_size - 1) / layout.block_size;
  return layout;
}

}  // namespace

SoloSequence::SoloSequence(const KvLayout& layout, int max_tokens, const MlaCodec* mla)
    : cache_(sized_for(layout, max_tokens), AllocatorKind::kPaged, max_tokens,
             /*with_storage=*/true),
      mla_(mla),
      max_tokens_(max_tokens) {
  cache_.require_add_sequence(kSeq);
}

void SoloSequence::keep_decoded() {
  const KvLayout& L = cache_.storage()->layout();
  if (L.is_latent() || (L.k_format.dtype == KvDtype::kF32 && L.v_format.dtype == KvDtype::kF32))
    return;  // read in place, or not K/V heads
  if (size_ != 0)
    throw InternalError("SoloSequence::keep_decoded",
                        "called after " + std::to_string(size_) + " tokens");
  decoded_ = std::make_unique<DecodedKvCache>(*cache_.storage(), max_tokens_);
}

void SoloSequence::run(Transformer& t, std::span<const int> tokens,
                       const std::function<void(int, std::span<const float>)>& on_logits,
                       int step_tokens) {
  run_chunks(
      t, cache_, kSeq, tokens, size_, [this] { return view(); }, on_logits, step_tokens);
  size_ += static_cast<int>(tokens.size());
}

KvSeqView SoloSequence::append() {
  cache_.require_append_slots(kSeq, 1);
  ++size_;
  return view();
}

KvSeqView SoloSequence::view() {
  KvSeqView v = cache_.view(kSeq);
  v.mla = mla_;
  v.decoded = decoded_.get();
  return v;
}

namespace {

// Holds a step's attention rows (they arrive layer by layer, each layer's queries in order) and
// hands them on query by query.
class QueryOrder final : public AttentionObserver {
 public:
  void on_attention(int layer, int head, int query_pos, std::span<const float> weights) override {
    calls_.push_back({layer, head, query_pos, rows_.size(), weights.size()});
    rows_.insert(rows_.end(), weights.begin(), weights.end());
  }
  void replay(AttentionObserver& to) {
    std::stable_sort(calls_.begin(), calls_.end(),
                     [](const Call& a, const Call& b) { return a.pos < b.pos; });
    for (const Call& c : calls_)
      to.on_attention(c.layer, c.head, c.pos, std::span<const float>(rows_.data() + c.at, c.n));
    calls_.clear();
    rows_.clear();
  }

 private:
  struct Call {
    int layer, head, pos;
    std::size_t at, n;
  };
  std::vector<Call> calls_;
  std::vector<float> rows_;
};

}  // namespace

void SoloSequence::watch(Transformer& t, std::span<const int> tokens, AttentionObserver& observer,
                         int step_tokens) {
  if (step_tokens < 1)
    throw InternalError("SoloSequence::watch", "step_tokens " + std::to_string(step_tokens));
  QueryOrder held;
  std::vector<StepToken> step;
  const int n = static_cast<int>(tokens.size());
  for (int begin = 0; begin < n; begin += step_tokens) {
    const int count = std::min(step_tokens, n - begin);
    cache_.require_append_slots(kSeq, count);
    step.clear();
    add_chunk(step, view(), size_,
              tokens.subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(count)),
              size_,
              /*want_logits=*/false, &held);
    t.forward_step(step);
    size_ += count;
    held.replay(observer);
  }
}

std::span<const float> SoloSequence::step(Transformer& t, int token, AttentionObserver* observer) {
  const int pos = size_;
  const StepToken one{token, pos, append(), true, observer};
  return t.forward_step(std::span<const StepToken>(&one, 1));
}

}  // namespace kvscope

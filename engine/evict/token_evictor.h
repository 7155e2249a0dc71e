// TokenEvictor: applies an EvictionConfig to one paged sequence, behind the cache view. Evicted
// slots are marked dead (KvSeqView::slot_live), blocks whose slots are all dead go back to the
// pool, partially emptied blocks are compacted on a chosen policy, and RoPE positions either stay
// the original ones or are shifted to be contiguous (llama.cpp's context shift: cached keys are
// re-rotated). The forward pass only ever sees the view. See docs/concepts/eviction.md.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/evict/policy.h"
#include "engine/kv/cache_manager.h"

namespace kvscope {

class AttentionRecorder;

// When partially emptied blocks are compacted (live slots moved down so trailing blocks free up).
enum class CompactionPolicy { kNever, kHalfEmpty, kAlways };
// Which RoPE position a cached token keeps after eviction.
enum class PositionMode {
  kKeep,   // its original position (no re-rotation; gaps stay in the position sequence)
  kShift,  // contiguous positions 0..live-1: keys re-rotated by the shift (llama.cpp)
};

struct EvictorOptions {
  EvictionConfig policy;
  CompactionPolicy compaction = CompactionPolicy::kNever;
  PositionMode positions = PositionMode::kKeep;
};

// What the evictor has done so far.
struct EvictorCounters {
  long tokens_evicted = 0;
  long blocks_freed = 0;  // fully evicted blocks, plus blocks freed by compaction
  long slots_moved = 0;   // compaction moves (each a SlotMoved event)
  long keys_rotated = 0;  // (slot, layer) keys re-rotated by a position shift
  int evictions = 0;      // evict_to calls that evicted something
};

class TokenEvictor {
 public:
  // Throws kvscope::Error (naming the bad field) when the options or the cache cannot work:
  // budget < 2, sinks >= budget, a contiguous cache, prefix caching, KIVI.
  // `backend` (the one running the sequence's forward pass) applies the position shift's key
  // re-rotations where the pool's bytes live.
  TokenEvictor(KvCacheManager& cache, SeqId seq, const EvictorOptions& options, float rope_theta,
               Backend& backend);

  const EvictorOptions& options() const { return options_; }
  // RoPE position of the next token appended (its index, or the next contiguous position).
  int next_position() const { return next_position_; }
  // Index of the next token in the sequence (0 for the first), whatever its RoPE position.
  int next_token() const { return next_token_; }
  // The forward pass's view. Call after cache.append_slots(seq, n): new slots are registered as
  // live tokens at the next positions.
  KvSeqView view();
  int num_live() const;
  // Per slot, in slot order (which is token order): token index, RoPE position, liveness.
  std::span<const std::int32_t> slot_tokens() const { return slot_token_; }
  std::span<const std::int32_t> slot_positions() const { return slot_pos_; }
  std::span<const std::uint8_t> slot_live() const { return slot_live_; }

  // Evicts down to `live_target` live tokens with the policy (nothing when within). Attention
  // based policies (h2o, snapkv, tova) read `recorder`, which must have seen every query so far.
  // Returns the number of tokens evicted.
  int evict_to(int live_target, const AttentionRecorder* recorder);
  // Streaming: after a token's forward pass, trims to budget - 1 so that the next query attends
  // to at most `budget` tokens, itself included.
  int after_token(const AttentionRecorder* recorder) {
    return evict_to(options_.policy.budget - 1, recorder);
  }
  const EvictorCounters& counters() const { return counters_; }

 private:
  void sync();
  void free_dead_blocks();
  void compact();
  void shift_positions();
  KvCacheManager& cache_;
  SeqId seq_;
  EvictorOptions options_;
  float rope_theta_;
  Backend& backend_;
  int next_position_ = 0;
  int next_token_ = 0;
  std::vector<std::uint8_t> slot_live_;   // [num_slots] 0 = evicted
  std::vector<std::int32_t> slot_pos_;    // [num_slots] RoPE position of the slot's key
  std::vector<std::int32_t> slot_token_;  // [num_slots] token index (identity for statistics)
  EvictorCounters counters_;
};

// Forwards attention to a recorder under the query's token index instead of its RoPE position
// (they differ after a position shift). Set the recorder's slot positions to slot_tokens() first.
class TokenIndexObserver final : public AttentionObserver {
 public:
  TokenIndexObserver(AttentionObserver& inner, int token) : inner_(inner), token_(token) {}
  void on_attention(int layer, int head, int, std::span<const float> weights) override {
    inner_.on_attention(layer, head, token_, weights);
  }

 private:
  AttentionObserver& inner_;
  int token_;
};

CompactionPolicy parse_compaction_policy(const std::string& name, const std::string& where);
std::string compaction_policy_name(CompactionPolicy policy);
PositionMode parse_position_mode(const std::string& name, const std::string& where);
std::string position_mode_name(PositionMode mode);
// True for policies that read attention statistics (h2o, snapkv, tova).
bool needs_attention(EvictionKind kind);

}  // namespace kvscope

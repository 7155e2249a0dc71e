// TokenEvictor: eviction, block release, compaction and position shifts on one paged sequence.
#include "engine/evict/token_evictor.h"

#include <algorithm>

#include "engine/common/error.h"
#include "engine/evict/attention_stats.h"

namespace kvscope {

bool needs_attention(EvictionKind kind) {
  return kind == EvictionKind::kH2O || kind == EvictionKind::kSnapKV || kind == EvictionKind::kTova;
}

TokenEvictor::TokenEvictor(KvCacheManager& cache, SeqId seq, const EvictorOptions& options,
                           float rope_theta, Backend& backend)
    : cache_(cache), seq_(seq), options_(options), rope_theta_(rope_theta), backend_(backend) {
  validate(options_.policy);
  cache_.check_evictable(seq_, "token eviction");
  sync();
}

void TokenEvictor::sync() {
  const int n = cache_.table(seq_).num_tokens;
  const int have = static_cast<int>(slot_live_.size());
  if (n < have) {
    throw Error("token eviction", "the sequence lost slots outside the evictor (" +
                                      std::to_string(have) + " -> " + std::to_string(n) + ")");
  }
  for (int s = have; s < n; ++s) {
    slot_live_.push_back(1);
    slot_pos_.push_back(next_position_++);
    slot_token_.push_back(next_token_++);
  }
}

KvSeqView TokenEvictor::view() {
  sync();
  KvSeqView v = cache_.view(seq_);
  v.slot_live = slot_live_.data();
  v.slot_pos = slot_pos_.data();
  return v;
}

int TokenEvictor::num_live() const {
  return static_cast<int>(std::count(slot_live_.begin(), slot_live_.end(), std::uint8_t{1}));
}

int TokenEvictor::evict_to(int live_target, const AttentionRecorder* recorder) {
  sync();
  if (options_.policy.kind == EvictionKind::kNone) return 0;
  std::vector<int> live_slots;  // ascending slots = ascending token indices
  for (std::size_t s = 0; s < slot_live_.size(); ++s) {
    if (slot_live_[s] != 0) live_slots.push_back(static_cast<int>(s));
  }
  if (static_cast<int>(live_slots.size()) <= live_target) return 0;
  if (live_target < 1)
    fail_expected("token eviction: live target", ">= 1", std::to_string(live_target));
  TokenStats stats;
  for (int s : live_slots) stats.positions.push_back(slot_token_[static_cast<std::size_t>(s)]);
  if (needs_attention(options_.policy.kind)) {
    if (recorder == nullptr) {
      throw Error("token eviction",
                  eviction_kind_name(options_.policy.kind) +
                      " needs attention statistics; expected an AttentionRecorder");
    }
    stats = recorder->token_stats(stats.positions);
  } else {
    stats.cumulative.assign(live_slots.size(), 0.0f);
    stats.last_query.assign(live_slots.size(), 0.0f);
    stats.window_votes.assign(live_slots.size(), 0.0f);
  }
  EvictionConfig config = options_.policy;
  config.budget = live_target;
  const std::vector<int> keep = select_keep(config, stats, counters_.evictions);
  std::vector<std::uint8_t> kept(live_slots.size(), 0);
  for (int i : keep) kept[static_cast<std::size_t>(i)] = 1;
  int evicted = 0;
  for (std::size_t i = 0; i < live_slots.size(); ++i) {
    if (kept[i] == 0) {
      slot_live_[static_cast<std::size_t>(live_slots[i])] = 0;
      ++evicted;
    }
  }
  if (evicted == 0) return 0;
  counters_.tokens_evicted += evicted;
  ++counters_.evictions;
  cache_.record_tokens_evicted(seq_, evicted, static_cast<int>(live_slots.size()) - evicted);
  free_dead_blocks();
  compact();
  if (options_.positions == PositionMode::kShift) shift_positions();
  return evicted;
}

void TokenEvictor::free_dead_blocks() {
  const int bs = cache_.layout().block_size;
  const int n = static_cast<int>(slot_live_.size());
  for (int b = (n + bs - 1) / bs - 1; b >= 0; --b) {
    const int first = b * bs, end = std::min(n, first + bs);
    if (std::any_of(slot_live_.begin() + first, slot_live_.begin() + end,
                    [](std::uint8_t v) { return v != 0; })) {
      continue;
    }
    cache_.remove_block(seq_, b);
    slot_live_.erase(slot_live_.begin() + first, slot_live_.begin() + end);
    slot_pos_.erase(slot_pos_.begin() + first, slot_pos_.begin() + end);
    slot_token_.erase(slot_token_.begin() + first, slot_token_.begin() + end);
    ++counters_.blocks_freed;
  }
}

void TokenEvictor::compact() {
  const int bs = cache_.layout().block_size;
  const int n = static_cast<int>(slot_live_.size());
  const auto first_dead = std::find(slot_live_.begin(), slot_live_.end(), std::uint8_t{0});
  if (first_dead == slot_live_.end()) return;
  bool go = options_.compaction == CompactionPolicy::kAlways;
  if (options_.compaction == CompactionPolicy::kHalfEmpty) {
    // A full (not the last) block with at most half of its slots live.
    for (int b = 0; (b + 1) * bs < n && !go; ++b) {
      go = std::count(slot_live_.begin() + b * bs, slot_live_.begin() + (b + 1) * bs,
                      std::uint8_t{1}) *
               2 <=
           bs;
    }
  }
  if (!go) return;
  // Slide every live slot after the first hole down, keeping token order.
  int write = static_cast<int>(first_dead - slot_live_.begin());
  for (int read = write + 1; read < n; ++read) {
    const auto r = static_cast<std::size_t>(read), w = static_cast<std::size_t>(write);
    if (slot_live_[r] == 0) continue;
    cache_.move_slot(seq_, read, write);
    slot_live_[w] = 1;
    slot_pos_[w] = slot_pos_[r];
    slot_token_[w] = slot_token_[r];
    ++counters_.slots_moved;
    ++write;
  }
  const int blocks_before = cache_.blocks_for(n);
  cache_.truncate(seq_, write);
  counters_.blocks_freed += blocks_before - cache_.blocks_for(write);
  slot_live_.resize(static_cast<std::size_t>(write));
  slot_pos_.resize(static_cast<std::size_t>(write));
  slot_token_.resize(static_cast<std::size_t>(write));
}

void TokenEvictor::shift_positions() {
  const int bs = cache_.layout().block_size;
  const std::vector<BlockId>& blocks = cache_.table(seq_).blocks;
  std::vector<KvKeyRotation> rotations;
  int next = 0;
  for (std::size_t s = 0; s < slot_live_.size(); ++s) {
    if (slot_live_[s] == 0) continue;
    if (slot_pos_[s] != next) {
      const int slot = static_cast<int>(s);
      rotations.push_back(
          {blocks[static_cast<std::size_t>(slot / bs)], slot % bs, next - slot_pos_[s]});
      slot_pos_[s] = next;
    }
    ++next;
  }
  next_position_ = next;
  if (rotations.empty()) return;
  counters_.keys_rotated += static_cast<long>(rotations.size()) * cache_.layout().n_layers;
  // An operation on the pool that the backend applies where its bytes live (the CPU's tiles, or a
  // device's copy).
  backend_.rotate_keys(*cache_.storage(), rotations, rope_theta_);
}

std::string compaction_policy_name(CompactionPolicy policy) {
  switch (policy) {
    case CompactionPolicy::kNever:
      return "never";
    case CompactionPolicy::kHalfEmpty:
      return "half";
    case CompactionPolicy::kAlways:
      return "always";
  }
  return "never";
}

CompactionPolicy parse_compaction_policy(const std::string& name, const std::string& where) {
  for (auto p :
       {CompactionPolicy::kNever, CompactionPolicy::kHalfEmpty, CompactionPolicy::kAlways}) {
    if (compaction_policy_name(p) == name) return p;
  }
  fail_expected(where, "a compaction policy (never, half, always)", "'" + name + "'");
}

std::string position_mode_name(PositionMode mode) {
  return mode == PositionMode::kKeep ? "keep" : "shift";
}

PositionMode parse_position_mode(const std::string& name, const std::string& where) {
  if (name == "keep") return PositionMode::kKeep;
  if (name == "shift") return PositionMode::kShift;
  fail_expected(where, "a position mode (keep, shift)", "'" + name + "'");
}

}  // namespace kvscope

// KvEventModel: live blocks per (rank, medium, group, hash), slots, counters and the recording.
#include "engine/trace/kv_event_model.h"

#include <algorithm>
#include <limits>

#include "engine/common/error.h"

namespace kvscope {

namespace {
constexpr int kMaxRank = 65535;
constexpr const char* kDefaultMedium = "GPU";  // what nil / absent means in both engines
}  // namespace

KvEventModel::KvEventModel(KvModelLimits limits) : limits_(limits) {
  if (limits_.max_media < 2) limits_.max_media = 2;  // room for the default and "OTHER"
  media_.push_back(kDefaultMedium);
}

int KvEventModel::medium_id(const std::string& name) {
  const std::string& n = name.empty() ? media_[0] : name;
  for (std::size_t i = 0; i < media_.size(); ++i)
    if (media_[i] == n) return static_cast<int>(i);
  // A stream inventing media names without end must not grow the table without end.
  if (media_.size() + 1 >= limits_.max_media) {
    for (std::size_t i = 0; i < media_.size(); ++i)
      if (media_[i] == "OTHER") return static_cast<int>(i);
    media_.push_back("OTHER");
    return static_cast<int>(media_.size()) - 1;
  }
  media_.push_back(n);
  return static_cast<int>(media_.size()) - 1;
}

void KvEventModel::record(const Event& e) {
  if (truncated_) return;
  if (events_.size() >= limits_.max_recorded_events) {
    // The open step cannot be kept whole: drop it and stop recording (a half step would show a
    // state the engine never had).
    events_.resize(steps_.empty() ? 0 : steps_.back().end);
    truncated_ = true;
    return;
  }
  events_.push_back(e);
}

// Events recorded between two batches (a restart's evictions) belong to the next batch's step,
// so the recording has exactly one step per batch.
void KvEventModel::begin_step() {
  if (steps_.size() >= limits_.max_recorded_batches) truncated_ = true;
}

void KvEventModel::end_step(double ts) {
  if (!truncated_) steps_.push_back(Step{events_.size(), totals_.live, ts});
}

void KvEventModel::erase(std::unordered_map<Key, Live, KeyHash>::iterator it, int rank,
                         int medium) {
  const std::int32_t slot = it->second.slot;
  record(Event{EventType::kCachedBlockEvicted, 0, -1, slot, -1, -1, 0});
  free_slots_.push_back(slot);
  live_.erase(it);
  --live_rm_[{rank, medium}];
  count(rank, [](KvModelCounters& c) { --c.live; });
}

void KvEventModel::stored(int rank, const KvStreamEvent& ev, double ts) {
  const int medium = medium_id(ev.medium);
  const std::uint64_t sc = scope(rank, medium, ev.group_idx);
  if (block_size_ == 0) block_size_ = ev.block_size;
  std::int32_t parent_slot = -1, depth = 0;
  if (ev.parent_hash) {
    auto it = live_.find(Key{*ev.parent_hash, sc});
    if (it == live_.end()) {
      count(rank, [](KvModelCounters& c) { ++c.unknown_parents; });
    } else {
      parent_slot = it->second.slot;
      depth = it->second.depth;
    }
  }
  bool has_parent = parent_slot >= 0;
  for (std::uint64_t h : ev.block_hashes) {
    count(rank, [](KvModelCounters& c) { ++c.blocks_stored; });
    // Depth of a chain: each block one below its parent (saturating: a hostile stream can make
    // a chain as long as it likes; the recording clamps it to the pool when it is built).
    const std::int32_t d =
        has_parent ? (depth < std::numeric_limits<std::int32_t>::max() ? depth + 1 : depth) : 0;
    auto [it, fresh] = live_.try_emplace(Key{h, sc}, Live{-1, d, ts});
    if (!fresh) {
      count(rank, [](KvModelCounters& c) { ++c.restored; });
      it->second.depth = d;
    } else if (live_.size() > limits_.max_live_blocks) {
      live_.erase(it);
      count(rank, [](KvModelCounters& c) { ++c.untracked_blocks; });
      has_parent = false;  // the chain continues from a block we do not hold
      depth = 0;
      parent_slot = -1;
      continue;
    } else {
      if (!free_slots_.empty()) {
        it->second.slot = free_slots_.back();
        free_slots_.pop_back();
      } else {
        it->second.slot = next_slot_++;
      }
      ++live_rm_[{rank, medium}];
      count(rank, [](KvModelCounters& c) {
        ++c.live;
        c.peak_live = std::max(c.peak_live, c.live);
      });
    }
    const std::int32_t slot = it->second.slot;
    record(Event{EventType::kBlockAllocated, 0, -1, slot, d, parent_slot, ev.block_size});
    record(Event{EventType::kBlockCached, 0, -1, slot, d, 1, parent_slot + 1});
    parent_slot = slot;
    depth = d;
    has_parent = true;
  }
}

void KvEventModel::removed(int rank, const KvStreamEvent& ev, double ts) {
  const int medium = medium_id(ev.medium);
  const std::uint64_t sc = scope(rank, medium, ev.group_idx);
  for (std::uint64_t h : ev.block_hashes) {
    auto it = live_.find(Key{h, sc});
    if (it == live_.end()) {
      count(rank, [](KvModelCounters& c) { ++c.unknown_removals; });
      continue;
    }
    const bool short_lived = ts - it->second.stored_ts < kKvShortLivedSeconds;
    erase(it, rank, medium);
    count(rank, [short_lived](KvModelCounters& c) {
      ++c.blocks_removed;
      c.short_lived += short_lived ? 1 : 0;
    });
  }
}

void KvEventModel::drop_rank(int rank) {
  // Every live block of the rank, all media and groups: AllBlocksCleared says "all blocks", and
  // after a restart the new process holds nothing. Ascending slots, as the importer clears.
  // Nothing held: nothing to scan (a payload may carry millions of AllBlocksCleared).
  if (const auto it = by_rank_.find(rank); it == by_rank_.end() || it->second.live == 0) return;
  std::vector<std::pair<std::int32_t, Key>> doomed;
  for (const auto& [key, live] : live_)
    if (static_cast<int>(key.scope >> 40) == rank) doomed.emplace_back(live.slot, key);
  std::sort(doomed.begin(), doomed.end(),
            [](const auto& x, const auto& y) { return x.first < y.first; });
  for (const auto& [slot, key] : doomed) {
    const int medium = static_cast<int>((key.scope >> 32) & 0xff);
    erase(live_.find(key), rank, medium);
    count(rank, [](KvModelCounters& c) { ++c.blocks_cleared; });
  }
}

void KvEventModel::apply(int rank, const KvEventBatch& batch) {
  if (rank < 0 || rank > kMaxRank)
    fail_expected("kv event model: rank", "a rank in [0, 65535]", std::to_string(rank));
  begin_step();
  count(rank, [&](KvModelCounters& c) {
    ++c.batches;
    c.skipped_events += batch.skipped_events;
    c.skipped_fields += batch.skipped_fields;
  });
  for (const KvStreamEvent& ev : batch.events) {
    count(rank, [&](KvModelCounters& c) { ++c.events[static_cast<std::size_t>(ev.kind)]; });
    switch (ev.kind) {
      case KvEventKind::kBlockStored:
        stored(rank, ev, batch.ts);
        break;
      case KvEventKind::kBlockRemoved:
        removed(rank, ev, batch.ts);
        break;
      case KvEventKind::kAllBlocksCleared:
        drop_rank(rank);
        break;
    }
  }
  end_step(batch.ts);
}

void KvEventModel::apply_undecodable(int rank) {
  if (rank < 0 || rank > kMaxRank)
    fail_expected("kv event model: rank", "a rank in [0, 65535]", std::to_string(rank));
  begin_step();
  count(rank, [](KvModelCounters& c) {
    ++c.batches;
    ++c.undecodable;
  });
  end_step(steps_.empty() ? 0.0 : steps_.back().ts);
}

void KvEventModel::restart(int rank) {
  if (rank < 0 || rank > kMaxRank)
    fail_expected("kv event model: rank", "a rank in [0, 65535]", std::to_string(rank));
  drop_rank(rank);  // recorded into the next batch's step
}

std::map<std::string, std::int64_t> KvEventModel::live_by_medium() const {
  std::map<std::string, std::int64_t> out;
  for (const auto& [rm, n] : live_rm_)
    if (n > 0) out[media_[static_cast<std::size_t>(rm.second)]] += n;
  return out;
}

std::map<std::string, std::int64_t> KvEventModel::live_by_medium(int rank) const {
  std::map<std::string, std::int64_t> out;
  for (const auto& [rm, n] : live_rm_)
    if (rm.first == rank && n > 0) out[media_[static_cast<std::size_t>(rm.second)]] += n;
  return out;
}

Timeline KvEventModel::build_timeline(const std::string& title) const {
  const std::size_t kept = steps_.empty() ? 0 : steps_.back().end;
  std::int32_t slots = 1;  // the pool: every slot a kept event names (parents were stored first)
  for (std::size_t i = 0; i < kept; ++i) slots = std::max(slots, events_[i].block + 1);
  TimelineHeader h;
  h.num_blocks = slots;
  h.block_size = static_cast<std::int32_t>(std::clamp<std::int64_t>(block_size_, 1, 32767));
  if (block_size_ == 0) h.block_size = 16;  // nothing stored: any size draws an empty pool
  h.title = title;
  h.allocator = "engine prefix cache (KV events)";
  h.kv_format = "";
  Timeline t(h);
  std::size_t e = 0;
  for (const Step& s : steps_) {
    for (; e < s.end; ++e) {
      Event ev = events_[e];
      // A recording's block-table index must lie inside the pool (recording load checks it).
      ev.logical = std::min(ev.logical, h.num_blocks - 1);
      if (ev.type == EventType::kBlockCached && ev.b > h.num_blocks) ev.b = 0;
      t.emit(ev);
    }
    StepMetrics m;
    m.blocks_total = h.num_blocks;
    m.blocks_cached_free = static_cast<std::int32_t>(std::min<std::int64_t>(s.live, h.num_blocks));
    m.free_blocks = h.num_blocks - m.blocks_cached_free;
    // Slots are kvscope's, not the engine's physical block ids, so fragmentation cannot be seen:
    // the free slots are reported as one run.
    m.largest_free_run = m.free_blocks;
    t.end_step(m);
  }
  return t;
}

}  // namespace kvscope

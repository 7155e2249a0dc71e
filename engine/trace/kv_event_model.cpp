// KvEventModel: live blocks per (rank, medium, group, hash), slots, counters and the recording.
#include "engine/trace/kv_event_model.h"

#include <algorithm>
#include <limits>

#include "engine/common/error.h"
#include "engine/kv/event_payloads.h"

namespace kvscope {

namespace {
constexpr int kMaxRank = 65535;
constexpr const char* kDefaultMedium = "GPU";  // what nil / absent means in both engines
constexpr std::uint8_t kHowRemoved = 0, kHowCleared = 1, kHowRestart = 2;

int rank_of(std::uint64_t scope) {
  return static_cast<int>(scope >> 40);
}
int medium_of_scope(std::uint64_t scope) {
  return static_cast<int>((scope >> 32) & 0xff);
}
std::int64_t group_of(std::uint64_t scope) {
  return static_cast<std::int64_t>(scope & 0xffffffff);
}

// SGLang's cache salt as a namespace fingerprint (0 for none): it namespaces every block of the
// event, so it is computed once per event.
std::uint64_t salt_of(const KvStreamEvent& ev) {
  if (ev.cache_salt.empty()) return 0;
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ ev.cache_salt.size();
  for (char c : ev.cache_salt)
    h = kv_fingerprint_mix(h, static_cast<std::uint64_t>(static_cast<std::int64_t>(c)));
  return h | 1;
}
}  // namespace

// The events' tags on the wire; defined here, not in the decoder (kv_event_stream.cpp, built only
// with attach), so the model and the reports built without msgpack have them too.
std::string_view kv_event_kind_name(KvEventKind kind) {
  switch (kind) {
    case KvEventKind::kBlockStored:
      return "BlockStored";
    case KvEventKind::kBlockRemoved:
      return "BlockRemoved";
    case KvEventKind::kAllBlocksCleared:
      return "AllBlocksCleared";
  }
  return "?";
}

const char* kv_clear_scope_name(KvClearScope s) {
  switch (s) {
    case KvClearScope::kAuto:
      return "auto";
    case KvClearScope::kGpu:
      return "gpu";
    case KvClearScope::kAll:
      return "all";
  }
  return "?";
}

KvClearScope parse_kv_clear_scope(const std::string& name, const std::string& flag) {
  for (KvClearScope s : {KvClearScope::kAuto, KvClearScope::kGpu, KvClearScope::kAll})
    if (name == kv_clear_scope_name(s)) return s;
  fail_expected(flag, "gpu, all or auto", "'" + name + "'");
}

const char* kv_engine_guess_name(KvEngineGuess g) {
  switch (g) {
    case KvEngineGuess::kUnknown:
      return "unknown";
    case KvEngineGuess::kVllm:
      return "vllm";
    case KvEngineGuess::kSglang:
      return "sglang";
  }
  return "?";
}

KvEventModel::KvEventModel(KvModelLimits limits) : limits_(limits) {
  if (limits_.max_media < 2) limits_.max_media = 2;  // room for the default and "OTHER"
  if (limits_.max_loras < 2) limits_.max_loras = 2;
  media_.push_back(kDefaultMedium);
  owners_.emplace_back();
  loras_.push_back("base");
  lora_counts_.emplace_back();
}

std::uint16_t KvEventModel::lora_id(const KvStreamEvent& ev) {
  if (ev.lora_name.empty() && !ev.lora_id) return 0;
  const std::string name =
      !ev.lora_name.empty() ? ev.lora_name : "lora#" + std::to_string(*ev.lora_id);
  for (std::size_t i = 0; i < loras_.size(); ++i)
    if (loras_[i] == name) return static_cast<std::uint16_t>(i);
  // Like media: a stream inventing adapters without end does not grow the table without end.
  if (loras_.size() + 1 >= limits_.max_loras) {
    for (std::size_t i = 0; i < loras_.size(); ++i)
      if (loras_[i] == "OTHER") return static_cast<std::uint16_t>(i);
  }
  loras_.push_back(loras_.size() + 1 >= limits_.max_loras ? std::string("OTHER") : name);
  lora_counts_.emplace_back();
  return static_cast<std::uint16_t>(loras_.size() - 1);
}

std::uint16_t KvEventModel::name_id(std::vector<std::string>& names, const std::string& name) {
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<std::uint16_t>(i);
  if (names.size() + 1 >= limits_.max_media) {
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == "OTHER") return static_cast<std::uint16_t>(i);
    names.push_back("OTHER");
  } else {
    names.push_back(name);
  }
  return static_cast<std::uint16_t>(names.size() - 1);
}

int KvEventModel::medium_of(const KvStreamEvent& ev) {
  if (ev.locality != "REMOTE") return medium_id(ev.medium);
  return medium_id((ev.medium.empty() ? std::string(kDefaultMedium) : ev.medium) + " (remote)");
}

// Fields and media only one engine sends. vLLM: locality, ownership, cache groups and spec
// kinds, extra keys, media CPU and STORAGE. SGLang: cache_salt, media CPU_PINNED, DISK,
// EXTERNAL, CPU_TIER1/2.
void KvEventModel::guess_engine(const KvStreamEvent& ev) {
  const std::string& m = ev.medium;
  if (!ev.locality.empty() || !ev.ownership.empty() || !ev.spec_kind.empty() || ev.group_idx != 0 ||
      !ev.block_extra.empty() || m == "CPU" || m == "STORAGE") {
    engine_ = KvEngineGuess::kVllm;
  } else if (!ev.cache_salt.empty() || m == "CPU_PINNED" || m == "DISK" || m == "EXTERNAL" ||
             m.starts_with("CPU_TIER")) {
    engine_ = KvEngineGuess::kSglang;
  }
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
                         std::uint8_t how) {
  const Key key = it->first;
  const Live& l = it->second;
  const std::int32_t slot = l.slot;
  record(to_event(ev::CachedBlockEvicted{slot, /*cached_by=*/-1}, 0));
  free_slots_.push_back(slot);
  --lora_counts_[l.lora].live;
  if (l.ownership != 0) --live_by_owner_[l.ownership];
  const std::int64_t group = group_of(key.scope);
  if (auto g = groups_.find(group); g != groups_.end()) --g->second.live;
  if (limits_.max_history > 0) {
    if (history_.size() >= limits_.max_history) history_.pop_front();
    history_.push_back(Gone{key.scope, key.hash, l.parent_hash, l.tokens, l.extra, seq_, last_ts_,
                            l.block_tokens, l.lora, l.has_parent_hash, how});
  }
  live_.erase(it);
  --live_rmg_[{rank, medium_of_scope(key.scope), group}];
  count(rank, [](KvModelCounters& c) { --c.live; });
}

// The event's group (nullptr past the group cap), updated with what the event says of it.
KvGroupInfo* KvEventModel::group_info(const KvStreamEvent& ev) {
  KvGroupInfo* group = nullptr;
  if (groups_.size() < limits_.max_groups || groups_.count(ev.group_idx) != 0) {
    group = &groups_[ev.group_idx];
    if (!ev.spec_kind.empty()) group->spec_kind = ev.spec_kind;
    if (ev.sliding_window) group->sliding_window = ev.sliding_window;
    if (ev.block_size > 0) group->block_size = ev.block_size;
  }
  return group;
}

// Where the event's chain starts: its parent block, when one is named and live in scope `sc`.
KvEventModel::ChainLink KvEventModel::chain_start(int rank, const KvStreamEvent& ev,
                                                  std::uint64_t sc) {
  ChainLink link;
  link.parent_hash = ev.parent_hash;
  link.rooted = !ev.parent_hash;  // a first block; else as rooted as the parent
  if (ev.parent_hash) {
    auto it = live_.find(Key{*ev.parent_hash, sc});
    if (it == live_.end()) {
      count(rank, [](KvModelCounters& c) { ++c.unknown_parents; });
    } else {
      link.parent_slot = it->second.slot;
      link.depth = it->second.depth;
      link.rooted = it->second.rooted;
    }
  }
  return link;
}

// A block new to the model: gives it a slot (a freed one first) and counts it live.
void KvEventModel::place_new(Live& l, int rank, int medium, std::int64_t group_idx,
                             std::uint16_t lora, KvGroupInfo* group) {
  if (!free_slots_.empty()) {
    l.slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    l.slot = next_slot_++;
    slot_gen_.push_back(0);
  }
  ++slot_gen_[static_cast<std::size_t>(l.slot)];
  l.lora = lora;
  ++lora_counts_[lora].live;
  ++live_rmg_[{rank, medium, group_idx}];
  if (group != nullptr) ++group->live;
  count(rank, [](KvModelCounters& c) {
    ++c.live;
    c.peak_live = std::max(c.peak_live, c.live);
  });
}

void KvEventModel::stored(int rank, const KvStreamEvent& ev, double ts) {
  const int medium = medium_of(ev);
  const std::uint64_t sc = scope(rank, medium, ev.group_idx);
  if (block_size_ == 0) block_size_ = ev.block_size;
  const std::uint16_t lora = lora_id(ev);
  const std::uint16_t owner = ev.ownership.empty() ? 0 : name_id(owners_, ev.ownership);
  KvGroupInfo* group = group_info(ev);
  const bool placeholder = ev.block_tokens.empty();
  const std::uint64_t salt = salt_of(ev);
  ChainLink link = chain_start(rank, ev, sc);
  bool has_parent = link.parent_slot >= 0;
  for (std::size_t b = 0; b < ev.block_hashes.size(); ++b) {
    const std::uint64_t h = ev.block_hashes[b];
    count(rank, [placeholder](KvModelCounters& c) {
      ++c.blocks_stored;
      c.placeholders += placeholder ? 1 : 0;
    });
    ++lora_counts_[lora].stored;
    if (group != nullptr) ++group->stored;
    // Depth of a chain: each block one below its parent (saturating: a hostile stream can make
    // a chain as long as it likes; the recording clamps it to the pool when it is built).
    const std::int32_t d =
        has_parent
            ? (link.depth < std::numeric_limits<std::int32_t>::max() ? link.depth + 1 : link.depth)
            : 0;
    auto [it, fresh] = live_.try_emplace(Key{h, sc}, Live{-1, d, ts});
    if (!fresh) {
      count(rank, [](KvModelCounters& c) { ++c.restored; });
      it->second.depth = d;
      --lora_counts_[it->second.lora].live;
      it->second.lora = lora;
      ++lora_counts_[lora].live;
      if (it->second.ownership != 0) --live_by_owner_[it->second.ownership];
    } else if (live_.size() > limits_.max_live_blocks) {
      live_.erase(it);
      count(rank, [](KvModelCounters& c) { ++c.untracked_blocks; });
      has_parent = false;  // the chain continues from a block we do not hold
      link.depth = 0;
      link.parent_slot = -1;
      link.rooted = false;
      link.parent_hash = h;
      continue;
    } else {
      place_new(it->second, rank, medium, ev.group_idx, lora, group);
    }
    const std::int32_t slot = it->second.slot;
    Live& l = it->second;
    l.has_parent_hash = link.parent_hash.has_value();
    l.parent_hash = link.parent_hash.value_or(0);
    l.tokens = placeholder ? 0 : ev.block_tokens[b];
    // Its namespace besides its LoRA: its extra keys and the event's cache salt.
    l.extra = (b < ev.block_extra.size() ? ev.block_extra[b] : 0) ^ salt;
    l.ownership = owner;
    if (owner != 0) ++live_by_owner_[owner];
    link.parent_hash = h;
    it->second.rooted = link.rooted;
    it->second.block_tokens =
        static_cast<std::int32_t>(std::clamp<std::int64_t>(ev.block_size, 0, 1 << 20));
    it->second.parent = link.parent_slot;
    it->second.parent_gen =
        link.parent_slot >= 0 ? slot_gen_[static_cast<std::size_t>(link.parent_slot)] : 0;
    record(to_event(ev::BlockAllocated{-1, slot, d, link.parent_slot, ev.block_size}, 0));
    // A hybrid model's KV cache group (vLLM's group_idx and kv_cache_spec_kind): the Block pool
    // colours its blocks by kind, as a hybrid scenario's.
    const int kind = ev.spec_kind.find("sliding") != std::string::npos ||
                             ev.spec_kind.find("chunked") != std::string::npos
                         ? 1
                     : ev.spec_kind.find("mamba") != std::string::npos ? 2
                                                                       : 0;
    if ((ev.group_idx > 0 || kind != 0) && ev.group_idx >= 0 && ev.group_idx <= 127) {
      record(to_event(
          ev::BlockGrouped{
              -1, slot, static_cast<std::int32_t>(ev.group_idx), kind,
              kind == 1 ? std::clamp<std::int64_t>(ev.sliding_window.value_or(0), 0, 1 << 24) : 0},
          0));
    }
    record(to_event(ev::BlockCached{-1, slot, d, /*ref_count=*/1, link.parent_slot}, 0));
    link.parent_slot = slot;
    link.depth = d;
    has_parent = true;
  }
}

void KvEventModel::removed(int rank, const KvStreamEvent& ev, double ts) {
  const int medium = medium_of(ev);
  const std::uint64_t sc = scope(rank, medium, ev.group_idx);
  for (std::uint64_t h : ev.block_hashes) {
    auto it = live_.find(Key{h, sc});
    if (it == live_.end()) {
      count(rank, [](KvModelCounters& c) { ++c.unknown_removals; });
      continue;
    }
    const bool short_lived = ts - it->second.stored_ts < kKvShortLivedSeconds;
    erase(it, rank, kHowRemoved);
    count(rank, [short_lived](KvModelCounters& c) {
      ++c.blocks_removed;
      c.short_lived += short_lived ? 1 : 0;
    });
  }
}

void KvEventModel::drop_rank(int rank, bool gpu_only, std::uint8_t how) {
  // The live blocks of the rank: every medium and group after a restart (the new process holds
  // nothing) or an AllBlocksCleared of scope all; the GPU medium's (id 0) for scope gpu.
  // Ascending slots, as the importer clears. Nothing held: nothing to scan (a payload may carry
  // millions of AllBlocksCleared).
  if (const auto it = by_rank_.find(rank); it == by_rank_.end() || it->second.live == 0) return;
  std::vector<std::pair<std::int32_t, Key>> doomed;
  for (const auto& [key, live] : live_) {
    if (rank_of(key.scope) == rank && (!gpu_only || medium_of_scope(key.scope) == 0))
      doomed.emplace_back(live.slot, key);
  }
  std::sort(doomed.begin(), doomed.end(),
            [](const auto& x, const auto& y) { return x.first < y.first; });
  for (const auto& [slot, key] : doomed) {
    erase(live_.find(key), rank, how);
    count(rank, [](KvModelCounters& c) { ++c.blocks_cleared; });
  }
}

void KvEventModel::apply(int rank, const KvEventBatch& batch, std::int64_t seq) {
  if (rank < 0 || rank > kMaxRank)
    fail_expected("kv event model: rank", "a rank in [0, 65535]", std::to_string(rank));
  seq_ = seq;
  last_ts_ = batch.ts;
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
        guess_engine(ev);
        stored(rank, ev, batch.ts);
        break;
      case KvEventKind::kBlockRemoved:
        guess_engine(ev);
        removed(rank, ev, batch.ts);
        break;
      case KvEventKind::kAllBlocksCleared: {
        const bool gpu_only =
            clear_scope_ == KvClearScope::kGpu ||
            (clear_scope_ == KvClearScope::kAuto && engine_ == KvEngineGuess::kVllm);
        count(rank, [gpu_only](KvModelCounters& c) {
          c.clears_gpu_only += gpu_only ? 1 : 0;
          c.clears_all += gpu_only ? 0 : 1;
        });
        drop_rank(rank, gpu_only, kHowCleared);
        break;
      }
    }
  }
  end_step(batch.ts);
}

void KvEventModel::apply_undecodable(int rank) {
  if (rank < 0 || rank > kMaxRank)
    fail_expected("kv event model: rank", "a rank in [0, 65535]", std::to_string(rank));
  seq_ = -1;
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
  seq_ = -1;
  drop_rank(rank, /*gpu_only=*/false, kHowRestart);  // recorded into the next batch's step
}

std::map<std::string, std::int64_t> KvEventModel::live_by_medium() const {
  std::map<std::string, std::int64_t> out;
  for (const auto& [rmg, n] : live_rmg_)
    if (n > 0) out[media_[static_cast<std::size_t>(std::get<1>(rmg))]] += n;
  return out;
}

std::map<std::string, std::int64_t> KvEventModel::live_by_medium(int rank) const {
  std::map<std::string, std::int64_t> out;
  for (const auto& [rmg, n] : live_rmg_)
    if (std::get<0>(rmg) == rank && n > 0)
      out[media_[static_cast<std::size_t>(std::get<1>(rmg))]] += n;
  return out;
}

std::map<std::tuple<int, std::string, std::int64_t>, std::int64_t>
KvEventModel::live_by_rank_medium_group() const {
  std::map<std::tuple<int, std::string, std::int64_t>, std::int64_t> out;
  for (const auto& [rmg, n] : live_rmg_) {
    out[{std::get<0>(rmg), media_[static_cast<std::size_t>(std::get<1>(rmg))], std::get<2>(rmg)}] +=
        n;
  }
  return out;
}

std::map<std::string, std::int64_t> KvEventModel::live_by_ownership() const {
  std::map<std::string, std::int64_t> out;
  for (const auto& [id, n] : live_by_owner_) out[owners_[id]] += n;
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
  append_steps(t, 0);
  return t;
}

std::size_t KvEventModel::append_steps(Timeline& t, std::size_t from) const {
  const std::int32_t num_blocks = t.header().num_blocks;
  std::size_t e = from == 0 || from > steps_.size() ? 0 : steps_[from - 1].end;
  for (std::size_t i = from; i < steps_.size(); ++i) {
    const Step& s = steps_[i];
    for (; e < s.end; ++e) {
      Event ev = events_[e];
      if (ev.block >= num_blocks) {  // cannot happen with a pool of max_live_blocks slots
        throw InternalError("kv event model", "slot " + std::to_string(ev.block) +
                                                  " outside a live view of " +
                                                  std::to_string(num_blocks) + " slots");
      }
      // A recording's block-table index must lie inside the pool (recording load checks it).
      ev.logical = std::min(ev.logical, num_blocks - 1);
      if (ev.type == EventType::kBlockCached) {  // a parent outside the view: none
        auto cached = event_as<ev::BlockCached>(ev);
        if (cached.parent >= num_blocks) cached.parent = -1;
        ev = to_event(cached, ev.step);
      }
      t.emit(ev);
    }
    StepMetrics m;
    m.blocks_total = num_blocks;
    m.blocks_cached_free = static_cast<std::int32_t>(std::min<std::int64_t>(s.live, num_blocks));
    m.free_blocks = num_blocks - m.blocks_cached_free;
    // Slots are kvscope's, not the engine's physical block ids, so fragmentation cannot be seen:
    // the free slots are reported as one run.
    m.largest_free_run = m.free_blocks;
    t.end_step(m);
  }
  return steps_.size();
}

std::map<std::pair<int, std::string>, std::int64_t> KvEventModel::live_by_rank_medium() const {
  std::map<std::pair<int, std::string>, std::int64_t> out;
  for (const auto& [rmg, n] : live_rmg_)
    out[{std::get<0>(rmg), media_[static_cast<std::size_t>(std::get<1>(rmg))]}] += n;
  return out;
}

std::map<std::string, KvLoraCount> KvEventModel::by_lora() const {
  std::map<std::string, KvLoraCount> out;
  for (std::size_t i = 0; i < loras_.size(); ++i) {
    KvLoraCount& c = out[loras_[i]];
    c.live += lora_counts_[i].live;
    c.stored += lora_counts_[i].stored;
  }
  return out;
}

std::vector<KvSharedPrefix> KvEventModel::deepest_shared_prefixes(std::size_t n) const {
  struct Node {
    const Key* key = nullptr;
    const Live* live = nullptr;
    std::int32_t kids = 0;
  };
  std::vector<Node> by_slot(static_cast<std::size_t>(next_slot_));
  for (const auto& [key, live] : live_)
    by_slot[static_cast<std::size_t>(live.slot)] = {&key, &live};
  for (const auto& [key, live] : live_) {
    if (live.parent < 0) continue;
    Node& p = by_slot[static_cast<std::size_t>(live.parent)];
    // The parent slot may have been freed (and given to another block) since: not its child then.
    if (p.live != nullptr && slot_gen_[static_cast<std::size_t>(live.parent)] == live.parent_gen)
      ++p.kids;
  }
  std::vector<const Node*> shared;
  for (const Node& node : by_slot)
    if (node.live != nullptr && node.kids >= 2) shared.push_back(&node);
  auto deeper = [](const Node* a, const Node* b) {
    if (a->live->depth != b->live->depth) return a->live->depth > b->live->depth;
    if (a->kids != b->kids) return a->kids > b->kids;
    return a->live->slot < b->live->slot;
  };
  const std::size_t keep = std::min(n, shared.size());
  std::partial_sort(shared.begin(), shared.begin() + static_cast<std::ptrdiff_t>(keep),
                    shared.end(), deeper);
  std::vector<KvSharedPrefix> out;
  for (std::size_t i = 0; i < keep; ++i) {
    const Node& node = *shared[i];
    KvSharedPrefix p;
    p.rank = static_cast<int>(node.key->scope >> 40);
    p.medium = media_[static_cast<std::size_t>((node.key->scope >> 32) & 0xff)];
    p.lora = loras_[node.live->lora];
    p.blocks = node.live->depth < std::numeric_limits<std::int32_t>::max() ? node.live->depth + 1
                                                                           : node.live->depth;
    p.tokens = static_cast<std::int64_t>(p.blocks) * node.live->block_tokens;
    p.complete = node.live->rooted;
    p.branches = node.kids;
    p.slot = node.live->slot;
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace kvscope

// DEMO DATA generator: a small fabricated continuous-batching scheduler over a paged block pool.
// Not the engine's Simulator and not a measurement; it only has to look plausible and be seeded.
#include "app/demo/demo_source.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <optional>
#include <string>

namespace kvscope::ui {

namespace {

struct Rng {  // splitmix64: identical sequences on every platform
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int below(int n) { return static_cast<int>(next() % static_cast<std::uint64_t>(n)); }
  double unit() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
};

struct DemoRequest {
  RequestState state;
  int prompt = 0;  // prompt tokens (shared prefix included)
  int max_new = 0;
  int generated = 0;
  int group = -1;  // shared system prompt group, -1 none
};

constexpr int kGroups = 3;
constexpr int kGroupPrefixTokens[kGroups] = {64, 128, 96};

}  // namespace

struct DemoSim {
  int block_size = 16;
  int step = -1;
  Rng rng{7};
  std::vector<BlockState> blocks;
  std::vector<int> cache_tag;  // [num_blocks] prefix-cache tag of the block's content, -1 none
  std::deque<int> free_queue;  // candidates for allocation (validated lazily)
  int free_count = 0;
  std::vector<DemoRequest> requests;  // by id
  std::deque<int> waiting;
  std::vector<int> running;  // in admission order
  std::vector<int> group_prefix[kGroups];
  int max_batch = 24;
  int burst_begin = 0, burst_end = 0;  // a late burst of arrivals that forces preemption
  std::int64_t preemptions = 0, recomputed = 0, prefix_hits = 0, prompt_total = 0;
  std::int64_t prefill_now = 0, decode_now = 0;

  void init(const DemoConfig& c) {
    block_size = c.block_size;
    rng = Rng{c.seed};
    blocks.assign(c.num_blocks, BlockState{});
    cache_tag.assign(c.num_blocks, -1);
    for (int b = 0; b < c.num_blocks; ++b) free_queue.push_back(b);
    free_count = c.num_blocks;
    burst_begin = c.num_steps * 5 / 8;
    burst_end = burst_begin + std::max(1, c.num_steps / 12);
    max_batch = std::clamp(c.num_blocks / 14, 8, 8192);  // memory, not the cap, binds in bursts
  }

  bool group_prefix_valid(int g) const {
    if (group_prefix[g].empty()) return false;
    for (int b : group_prefix[g]) {
      if (cache_tag[b] != g) return false;
    }
    return true;
  }

  std::optional<int> allocate(int owner, int logical) {
    while (!free_queue.empty()) {
      const int b = free_queue.front();
      free_queue.pop_front();
      if (blocks[b].ref_count != 0) continue;  // stale entry
      cache_tag[b] = -1;                       // evicts any cached prefix it held
      blocks[b] = BlockState{owner, logical, 1, 0, BlockStatus::kOwned};
      --free_count;
      return b;
    }
    return std::nullopt;
  }

  void release(DemoRequest& r) {
    for (std::size_t i = 0; i < r.state.blocks.size(); ++i) {
      const int b = r.state.blocks[i];
      BlockState& s = blocks[b];
      if (--s.ref_count > 0) {
        if (s.owner == r.state.id) s.owner = other_holder(b, r.state.id);
        s.status = s.ref_count > 1 ? BlockStatus::kShared : BlockStatus::kOwned;
        continue;
      }
      const bool full = s.filled == block_size;
      if (full && cache_tag[b] < 0) cache_tag[b] = kGroups + r.state.id;  // cached, never hit
      s.status = full ? BlockStatus::kCachedFree : BlockStatus::kFree;
      if (!full) s = BlockState{};
      ++free_count;
      free_queue.push_back(b);
    }
    r.state.blocks.clear();
    r.state.num_tokens = 0;
  }

  int other_holder(int block, int leaving) const {
    for (int id : running) {
      if (id == leaving) continue;
      const auto& bl = requests[id].state.blocks;
      if (std::find(bl.begin(), bl.end(), block) != bl.end()) return id;
    }
    return -1;
  }

  void arrive() {
    const double wave = 0.5 + 0.5 * std::sin(step / 37.0) + 0.25 * std::sin(step / 11.0);
    const double expected = std::max(0.0, wave) * static_cast<double>(blocks.size()) / 2000.0;
    const double rate = (step >= burst_begin && step < burst_end) ? expected * 3.5 : expected;
    int n = static_cast<int>(rate);
    if (rng.unit() < rate - n) ++n;
    for (int i = 0; i < n; ++i) {
      DemoRequest r;
      r.state.id = static_cast<int>(requests.size());
      r.group = rng.unit() < 0.6 ? rng.below(kGroups) : -1;
      r.prompt = (r.group >= 0 ? kGroupPrefixTokens[r.group] : 0) + 24 + rng.below(340);
      r.max_new = 12 + rng.below(rng.unit() < 0.2 ? 600 : 200);
      requests.push_back(std::move(r));
      waiting.push_back(requests.back().state.id);
    }
  }

  bool admit(DemoRequest& r) {
    const int total_blocks = (r.prompt + block_size - 1) / block_size;
    const bool hit = r.group >= 0 && group_prefix_valid(r.group);
    const int shared = hit ? static_cast<int>(group_prefix[r.group].size()) : 0;
    const int reviving = hit ? static_cast<int>(std::count_if(
                                   group_prefix[r.group].begin(), group_prefix[r.group].end(),
                                   [&](int b) { return blocks[b].ref_count == 0; }))
                             : 0;
    if (free_count - reviving < total_blocks - shared) return false;
    r.state.phase = RequestPhase::kRunning;
    if (hit) {
      for (int i = 0; i < shared; ++i) {
        const int b = group_prefix[r.group][i];
        BlockState& s = blocks[b];
        if (s.ref_count++ == 0) {
          --free_count;
          s.owner = r.state.id;
          s.logical = i;
        }
        s.status = s.ref_count > 1 ? BlockStatus::kShared : BlockStatus::kOwned;
        r.state.blocks.push_back(b);
      }
      prefix_hits += shared * block_size;
    }
    for (int i = shared; i < total_blocks; ++i) r.state.blocks.push_back(*allocate(r.state.id, i));
    for (int i = shared; i < total_blocks; ++i) {
      const int b = r.state.blocks[i];
      blocks[b].filled = static_cast<std::int16_t>(std::min(block_size, r.prompt - i * block_size));
    }
    if (r.group >= 0 && !hit) {
      const int n = kGroupPrefixTokens[r.group] / block_size;
      group_prefix[r.group].assign(r.state.blocks.begin(), r.state.blocks.begin() + n);
      for (int b : group_prefix[r.group]) cache_tag[b] = r.group;
    }
    r.state.num_tokens = r.prompt;
    prefill_now += r.prompt - shared * block_size;
    prompt_total += r.prompt;
    return true;
  }

  void preempt_youngest() {
    const int victim = running.back();
    running.pop_back();
    DemoRequest& v = requests[victim];
    recomputed += v.state.num_tokens;
    ++preemptions;
    release(v);
    v.state.phase = RequestPhase::kWaiting;
    v.generated = 0;
    waiting.push_front(victim);
  }

  void decode() {
    for (std::size_t i = 0; i < running.size(); ++i) {
      DemoRequest& r = requests[running[i]];
      if (r.state.num_tokens % block_size == 0) {
        std::optional<int> b;
        while (!(b = allocate(r.state.id, static_cast<int>(r.state.blocks.size())))) {
          if (running.back() == r.state.id) return;  // nobody younger left: wait
          preempt_youngest();
        }
        r.state.blocks.push_back(*b);
      }
      ++blocks[r.state.blocks.back()].filled;
      ++r.state.num_tokens;
      ++r.generated;
      ++decode_now;
    }
  }

  void finish() {
    for (std::size_t i = 0; i < running.size();) {
      DemoRequest& r = requests[running[i]];
      if (r.generated < r.max_new) {
        ++i;
        continue;
      }
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
      release(r);
      r.state.phase = RequestPhase::kFinished;
    }
  }

  void advance() {
    ++step;
    prefill_now = decode_now = 0;
    arrive();
    decode();
    while (!waiting.empty() && static_cast<int>(running.size()) < max_batch) {
      if (!admit(requests[waiting.front()])) break;
      running.push_back(waiting.front());
      waiting.pop_front();
    }
    finish();
  }

  StepMetrics metrics(double bytes_per_token) const {
    StepMetrics m;
    m.step = step;
    m.blocks_total = static_cast<std::int32_t>(blocks.size());
    int run = 0;
    for (const BlockState& b : blocks) {
      if (b.ref_count > 0) {
        ++m.blocks_used;
        m.slots_filled += b.filled;
        run = 0;
      } else {
        if (b.status == BlockStatus::kCachedFree) ++m.blocks_cached_free;
        m.largest_free_run = std::max(m.largest_free_run, ++run);
      }
    }
    m.free_blocks = m.blocks_total - m.blocks_used;
    m.slots_allocated = static_cast<std::int64_t>(m.blocks_used) * block_size;
    m.internal_frag_slots = m.slots_allocated - m.slots_filled;
    m.requests_waiting = static_cast<std::int32_t>(waiting.size());
    m.requests_running = static_cast<std::int32_t>(running.size());
    for (const DemoRequest& r : requests)
      m.requests_finished += r.state.phase == RequestPhase::kFinished;
    m.preemptions = preemptions;
    m.tokens_recomputed = recomputed;
    m.prefill_tokens = prefill_now;
    m.decode_tokens = decode_now;
    m.prefix_hit_tokens = prefix_hits;
    m.prompt_tokens = prompt_total;
    m.kv_bytes_used = static_cast<std::int64_t>(m.slots_allocated * bytes_per_token);
    return m;
  }

  void fill(PoolState& out) const {
    out.step = step;
    out.block_size = block_size;
    out.blocks = blocks;
    out.requests.resize(requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) out.requests[i] = requests[i].state;
  }
};

DemoSource::DemoSource(DemoConfig config) : config_(config) {
  header_.num_blocks = config.num_blocks;
  header_.block_size = config.block_size;
  header_.title = "Demo: chat traffic with three shared system prompts";
  header_.allocator = "paged";
  header_.kv_format = "fp32";
  header_.kv_bytes_per_token = 2.0 * 5 * 4 * 8 * 4;  // the stories260K shape in fp32
  auto sim = std::make_unique<DemoSim>();
  sim->init(config);
  for (int s = 0; s < config.num_steps; ++s) {
    sim->advance();
    metrics_.push_back(sim->metrics(header_.kv_bytes_per_token));
    if (s % kSnapshotEvery == 0) snapshots_.push_back(std::make_unique<DemoSim>(*sim));
  }
}

DemoSource::~DemoSource() = default;

void DemoSource::state_at(int step, PoolState& out) const {
  step = std::clamp(step, 0, num_steps() - 1);
  const DemoSim& base = *snapshots_[step / kSnapshotEvery];
  if (base.step == step) return base.fill(out);
  DemoSim sim = base;
  while (sim.step < step) sim.advance();
  sim.fill(out);
}

std::string DemoSource::describe() const {
  return "demo data (fabricated, seed " + std::to_string(config_.seed) + ", " +
         std::to_string(config_.num_blocks) + " blocks x " + std::to_string(config_.block_size) +
         " tokens)";
}

}  // namespace kvscope::ui

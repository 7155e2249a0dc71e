// KvTiers: admission's view of the tiers, reloads, write-back and write-through, tier events.
#include "engine/tiers/kv_tiers.h"

#include <cstring>
#include <optional>
#include <string>

#include "engine/common/error.h"
#include "engine/kv/event_payloads.h"

namespace kvscope {

KvTiers::KvTiers(KvTiersOptions options, KvStorage* storage, std::size_t block_bytes,
                 EventSink* sink, const int* step)
    : options_(std::move(options)),
      storage_(storage),
      sink_(sink),
      step_(step),
      store_(options_.tiers, block_bytes, storage != nullptr),
      reloads_(options_.tiers.size()) {
  if (storage_ != nullptr) block_.resize(block_bytes);
  if (options_.prefetch) prefetcher_ = std::make_unique<TierPrefetcher>(store_, mutex_);
}

KvTiers::~KvTiers() = default;

KvTierIo KvTiers::io(int tier) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return store_.io(tier);
}

void KvTiers::check_invariants() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  store_.check_invariants();
}

int KvTiers::run_locked(std::span<const TokenId> tokens, int from_block,
                        std::vector<std::uint64_t>& keys) const {
  const int bs = options_.block_size;
  const int whole = (static_cast<int>(tokens.size()) - 1) / bs;
  if (whole <= from_block) return 0;
  chain_keys(tokens.first(static_cast<std::size_t>(whole) * static_cast<std::size_t>(bs)), bs,
             keys);
  int n = 0;
  while (from_block + n < whole && store_.locate(keys[static_cast<std::size_t>(from_block + n)]))
    ++n;
  return n;
}

int KvTiers::run_length(std::span<const TokenId> tokens, int from_block) const {
  std::vector<std::uint64_t> keys;
  const std::lock_guard<std::mutex> lock(mutex_);
  return run_locked(tokens, from_block, keys);
}

void KvTiers::prefetch(std::int32_t request, std::span<const TokenId> tokens, int from_block) {
  if (!prefetcher_) return;
  std::vector<std::uint64_t> keys;
  int n = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    n = run_locked(tokens, from_block, keys);
  }
  if (n == 0) return;
  // Staged bytes wait in memory until admission: past the budget, a request's blocks are read at
  // its admission instead.
  const std::size_t bytes = block_.size() * static_cast<std::size_t>(n);
  if (staged_bytes_ + bytes > kPrefetchBudgetBytes) return;
  staged_bytes_ += bytes;
  jobs_[request] = prefetcher_->submit(
      std::vector<std::uint64_t>(keys.begin() + from_block, keys.begin() + from_block + n));
}

std::shared_ptr<TierPrefetcher::Job> KvTiers::take_prefetch(std::int32_t request) {
  const auto it = jobs_.find(request);
  if (it == jobs_.end()) return nullptr;
  std::shared_ptr<TierPrefetcher::Job> job = it->second;
  jobs_.erase(it);
  staged_bytes_ -= job->bytes.size();
  return job;
}

KvTiers::Reload KvTiers::read_run(std::int32_t request, std::span<const TokenId> tokens,
                                  int hit_blocks) {
  Reload run;
  // The request's prefetch, if it has one: admission waits for it (that wait is the part of the
  // load it did not hide) and takes the blocks it staged.
  const std::shared_ptr<TierPrefetcher::Job> job = take_prefetch(request);
  if (job) run.exposed_seconds += prefetcher_->wait(job);
  const std::size_t bytes = store_.block_bytes();
  std::vector<std::uint64_t> keys;
  const std::lock_guard<std::mutex> lock(mutex_);
  const int n = run_locked(tokens, hit_blocks, keys);
  run.bytes.resize(block_.empty() ? 0 : static_cast<std::size_t>(n) * bytes);
  for (int i = 0; i < n; ++i) {
    const std::uint64_t key = keys[static_cast<std::size_t>(hit_blocks + i)];
    std::byte* out =
        run.bytes.empty() ? nullptr : run.bytes.data() + static_cast<std::size_t>(i) * bytes;
    std::optional<int> tier;
    double took = 0.0;
    if (const std::optional<std::size_t> staged = job ? job->staged_at(key) : std::nullopt) {
      tier = store_.touch(key);
      if (out != nullptr) std::memcpy(out, job->bytes.data() + *staged * bytes, bytes);
      took = job->seconds[*staged];
    } else {
      const int where = *store_.locate(key);
      const double before = store_.io(where).read_seconds;
      tier = store_.load(key, out);
      took = store_.io(where).read_seconds - before;
      run.exposed_seconds += took;
      if (!tier) emit(ev::TierMoved{where, -1, key});  // failed its check
    }
    run.load_seconds += took;
    if (!tier) break;  // failed its check: recomputed from here on
    Reloads& t = reloads_[static_cast<std::size_t>(*tier)];
    ++t.blocks;
    t.seconds += took;
    run.from_tier.push_back(*tier);
  }
  run.bytes.resize(run.bytes.empty() ? 0 : run.from_tier.size() * bytes);
  load_seconds_ += run.load_seconds;
  exposed_seconds_ += run.exposed_seconds;
  return run;
}

void KvTiers::place(std::int32_t request, const Reload& run, std::span<const BlockId> blocks,
                    int first_logical) {
  const std::size_t bytes = store_.block_bytes();
  for (int i = 0; i < run.blocks(); ++i) {
    const BlockId b = blocks[static_cast<std::size_t>(i)];
    if (!run.bytes.empty())
      storage_->write_block(b, run.bytes.data() + static_cast<std::size_t>(i) * bytes);
    const int tier = run.from_tier[static_cast<std::size_t>(i)];
    emit(ev::TierReloaded{request, b.value, first_logical + i, tier, store_.options(tier).medium});
  }
  hit_tokens_ += static_cast<std::int64_t>(run.blocks()) * options_.block_size;
}

void KvTiers::on_evicted(BlockId b, std::uint64_t key) {
  if (options_.write_through) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (store_.locate(key) == 0) {  // written through when it was cached: nothing to write
      static_cast<void>(store_.touch(key));
      return;
    }
  }
  if (!block_.empty()) storage_->read_block(b, block_.data());
  ev::TierWritten written;
  written.block = b.value;
  written.chain_key = key;
  std::vector<TierMove> moves;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    moves = store_.demote(key, block_.empty() ? nullptr : block_.data());
    written.tier = store_.locate(key) ? 0 : -1;  // a refused write loses the block
  }
  emit(written);
  for (const TierMove& m : moves) emit(ev::TierMoved{m.from, m.to, m.key});
}

void KvTiers::on_cached(std::span<const TokenId> tokens, int first, int end,
                        std::span<const BlockId> blocks) {
  if (!options_.write_through) return;
  std::vector<std::uint64_t> keys;
  const int bs = options_.block_size;
  chain_keys(tokens.first(static_cast<std::size_t>(end) * static_cast<std::size_t>(bs)), bs, keys);
  for (int i = first; i < end; ++i) {
    const std::uint64_t key = keys[static_cast<std::size_t>(i)];
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (store_.locate(key) == 0) continue;  // the first tier has it already
    }
    on_evicted(blocks[static_cast<std::size_t>(i)], key);
  }
}

void KvTiers::record_held() {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (int k = 0; k < store_.num_tiers(); ++k) {
    ev::TierHeld held;
    held.tier = k;
    held.blocks_held = store_.chain().held(k);
    held.capacity_blocks = store_.options(k).capacity_blocks;
    held.medium = store_.options(k).medium;
    emit(held);
  }
}

}  // namespace kvscope

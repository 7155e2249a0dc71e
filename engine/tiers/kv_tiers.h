// KvTiers: the KV tiers behind the prefix cache as one layer. It owns the store (the tier chain's
// policy and the blocks' bytes: engine/tiers/kv_tier_store.h), the prefetch thread, the lock they
// share, the tier events and the counters of what reloads cost. The scheduler asks it how much of
// a prompt the tiers hold (admission), to read that run back and place it in the request's fresh
// blocks, and hands it the blocks the pool evicts (write-back) or caches (write-through).
//
// THREADING: every method from the stepping thread. The prefetch thread touches the store only
// under the lock, which the methods here hold around each of their own calls into the store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/kv/block_pool.h"
#include "engine/kv/event_payloads.h"
#include "engine/kv/kv_storage.h"
#include "engine/prefix/block_hash.h"
#include "engine/tiers/kv_tier_store.h"
#include "engine/tiers/tier_prefetch.h"

namespace kvscope {

struct KvTiersOptions {
  std::vector<KvTierOptions> tiers;  // the first tier first
  int block_size = 16;               // tokens per block
  bool prefetch = true;              // read an arriving request's run on the IO thread
  bool write_through = false;        // write blocks as they are cached, not when evicted
};

class KvTiers {
 public:
  // `storage` null: bookkeeping only (no bytes move). Events go to `sink`, stamped with `*step`.
  // Throws kvscope::Error as KvTierStore does (a tier that cannot be opened).
  KvTiers(KvTiersOptions options, KvStorage* storage, std::size_t block_bytes, EventSink* sink,
          const int* step);
  ~KvTiers();  // joins the prefetch thread before the store goes
  KvTiers(const KvTiers&) = delete;
  KvTiers& operator=(const KvTiers&) = delete;

  // The prompt's whole blocks from `from_block` on that the tiers hold, in a row; never the block
  // holding the last token (its logits must be computed).
  int run_length(std::span<const TokenId> tokens, int from_block) const;
  // On arrival: starts reading that run on the IO thread (nothing without prefetch, or when the
  // bytes staged for admissions not yet taken would pass 256 MiB).
  void prefetch(std::int32_t request, std::span<const TokenId> tokens, int from_block);

  // A run read back: the tier each block came from, their bytes, and the time it took.
  struct Reload {
    std::vector<int> from_tier;
    std::vector<std::byte> bytes;  // [blocks][block bytes], empty when bookkeeping only
    double load_seconds = 0.0;     // reading the blocks (the prefetch thread's reads included)
    double exposed_seconds = 0.0;  // of it, what admission waited for
    int blocks() const { return static_cast<int>(from_tier.size()); }
  };
  // Reads what it can of the run after `hit_blocks` (the request's prefetch, when it has one,
  // supplies what it staged), stopping at a block that fails its check (dropped: TierMoved to
  // -1). Read before the caller allocates the blocks: allocating may evict cached blocks into the
  // tiers, which may pass the blocks being read further down or out.
  Reload read_run(std::int32_t request, std::span<const TokenId> tokens, int hit_blocks);
  // Writes a run's bytes into the request's fresh blocks (table indexes first_logical on) and
  // records each reload (TierReloaded).
  void place(std::int32_t request, const Reload& run, std::span<const BlockId> blocks,
             int first_logical);

  // Write-back: the pool evicts the cached block `b` (chain key `key`): TierWritten, and a
  // TierMoved per block a full tier passed down.
  void on_evicted(BlockId b, std::uint64_t key);
  // Write-through: the prompt's blocks [first, end) were just cached as `blocks` (the whole table
  // prefix: blocks[i] is block i); the first tier gets those it does not hold.
  void on_cached(std::span<const TokenId> tokens, int first, int end,
                 std::span<const BlockId> blocks);
  bool writes_through() const { return options_.write_through; }
  bool prefetches() const { return prefetcher_ != nullptr; }
  // At step end: one TierHeld per tier.
  void record_held();

  // Reloads per tier: blocks loaded and the measured seconds of those loads.
  struct Reloads {
    std::int64_t blocks = 0;
    double seconds = 0.0;
  };
  const std::vector<Reloads>& reloads() const { return reloads_; }
  std::int64_t hit_tokens() const { return hit_tokens_; }  // prompt tokens placed from the tiers
  double load_seconds() const { return load_seconds_; }
  double exposed_seconds() const { return exposed_seconds_; }
  // One tier's I/O counters, read under the lock (the prefetch thread may be reading).
  KvTierIo io(int tier) const;
  int num_tiers() const { return store_.num_tiers(); }
  const KvTierOptions& options(int tier) const { return store_.options(tier); }
  // The store, for reading between steps (tests, reports).
  const KvTierStore& store() const { return store_; }

  // Throws kvscope::InternalError when the chain and the slots disagree.
  void check_invariants() const;

 private:
  template <class Payload>
  void emit(const Payload& p) const {
    if (sink_ != nullptr) sink_->emit(to_event(p, *step_));
  }
  std::shared_ptr<TierPrefetcher::Job> take_prefetch(std::int32_t request);
  // Call with mutex_ held.
  int run_locked(std::span<const TokenId> tokens, int from_block,
                 std::vector<std::uint64_t>& keys) const;

  KvTiersOptions options_;
  KvStorage* storage_;
  EventSink* sink_;
  const int* step_;
  mutable std::mutex mutex_;  // around every call into store_ (the prefetch thread's too)
  KvTierStore store_;
  std::vector<std::byte> block_;                // a block on its way to the tiers
  std::unique_ptr<TierPrefetcher> prefetcher_;  // after store_: joined before it goes
  std::unordered_map<std::int32_t, std::shared_ptr<TierPrefetcher::Job>> jobs_;
  std::size_t staged_bytes_ = 0;  // staged by jobs not yet taken
  static constexpr std::size_t kPrefetchBudgetBytes = std::size_t{256} << 20;
  std::vector<Reloads> reloads_;  // [tier]
  std::int64_t hit_tokens_ = 0;
  double load_seconds_ = 0.0;
  double exposed_seconds_ = 0.0;
};

}  // namespace kvscope

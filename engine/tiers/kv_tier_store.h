// KvTierStore: the KV tiers behind the Simulator's prefix cache, with the blocks' bytes. A cached
// block the pool evicts is written to the first tier (write-back on eviction); TierChain decides
// which blocks each tier keeps (LRU) and passes down, and this store moves their bytes:
//   host: slots in RAM (anonymous memory, backed only once written);
//   disk: one file of fixed-size records in a directory, created when the store is and removed
//         when it goes, never larger than capacity x record. Each record is a header (magic, the
//         block's chain key, payload size, checksum) and the block's bytes, written with one
//         pwrite, synced and dropped from the page cache, so a later read comes from the device.
// Every block carries a 64-bit checksum of its bytes and key, checked on every read: a torn or
// corrupt block is reported as missing (the caller recomputes it), counted, and forgotten, never
// served. A write the disk refuses (full, over a size limit) drops that block the same way; the
// store keeps running and says so in its I/O counters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/kv/event_payloads.h"
#include "engine/tiers/block_slots.h"
#include "engine/tiers/tier_chain.h"

namespace kvscope {

struct KvTierOptions {
  std::string name;  // "host", "disk": how reports name it
  TierMedium medium = TierMedium::kHost;
  int capacity_blocks = 1;
  std::string dir;  // disk: the directory of the tier's file ("" = the system's temp directory)
};

// What one tier's I/O did, timed on this machine (steady clock around the copy or the system
// calls, checksums included).
struct KvTierIo {
  std::int64_t blocks_written = 0;
  std::int64_t blocks_read = 0;
  double write_seconds = 0.0;
  double read_seconds = 0.0;
  std::int64_t corrupt_reads = 0;  // failed their checksum, header or length: dropped, recomputed
  std::int64_t failed_writes = 0;  // the medium refused them (disk full): the block was dropped
  std::string first_failure;       // the first failure, in one line ("" when none)
};

class KvTierStore {
 public:
  // `with_bytes` false: the policy alone, no bytes and no file (bookkeeping-only runs). Throws
  // kvscope::Error naming the tier on no tiers, a capacity under one block, or a disk tier whose
  // directory is missing or not writable.
  KvTierStore(std::vector<KvTierOptions> tiers, std::size_t block_bytes, bool with_bytes);
  ~KvTierStore();
  KvTierStore(const KvTierStore&) = delete;
  KvTierStore& operator=(const KvTierStore&) = delete;

  // Write-back: the pool evicts the cached block `key` whose bytes are `bytes` (block_bytes();
  // ignored without bytes). It enters the first tier (locate() says whether the write held);
  // blocks each full tier passes down move with their bytes. Returns those pass-downs, the first
  // tier's first; `to` is -1 for a block dropped off the last tier or lost on the way.
  std::vector<TierMove> demote(std::uint64_t key, const std::byte* bytes);
  // The tier holding `key`, without I/O or counting a hit.
  std::optional<int> locate(std::uint64_t key) const { return chain_.locate(key); }
  // Reads `key`'s block into `out` (block_bytes()) and checks it: the tier it came from, which
  // keeps it as its most recently used block; nullopt when no tier holds it, or when its bytes
  // failed their check (then it is forgotten and counted in corrupt_reads).
  std::optional<int> load(std::uint64_t key, std::byte* out);
  // The prefetch thread's read: `key`'s bytes into `out`, checked, without refreshing the block,
  // counting a hit or forgetting it (the stepping thread's touch() or load() does that later, so
  // the tiers' contents never depend on the prefetch thread's timing). False when no tier holds
  // it or it failed its check. Callers serialize every call on the store (one mutex).
  bool peek(std::uint64_t key, std::byte* out);
  // The bookkeeping of a load whose bytes peek() read: the tier, the block refreshed there and a
  // hit counted; nullopt when no tier holds it any more.
  std::optional<int> touch(std::uint64_t key) { return chain_.find(key); }

  int num_tiers() const { return static_cast<int>(tiers_.size()); }
  const KvTierOptions& options(int tier) const { return tier_at(tier).options; }
  const KvTierIo& io(int tier) const { return tier_at(tier).io; }
  const TierChain& chain() const { return chain_; }
  std::size_t block_bytes() const { return block_bytes_; }
  bool with_bytes() const { return with_bytes_; }
  // The disk tier's file ("" for a host tier or without bytes).
  const std::string& file_path(int tier) const { return tier_at(tier).path; }
  // Where `key`'s record starts in its disk tier's file (tests tear and corrupt records there);
  // nullopt when the key is not on a disk tier.
  std::optional<std::int64_t> record_offset(std::uint64_t key) const;
  static constexpr std::size_t kRecordHeaderBytes = 32;
  // Timeline events carry a tier index in [0, 64); a chain this deep has no use anyway.
  static constexpr std::size_t kMaxTiers = 8;

  // Throws kvscope::InternalError when the chain and the slots disagree.
  void check_invariants() const;

 private:
  struct Tier {
    KvTierOptions options;
    KvTierIo io;
    std::unordered_map<std::uint64_t, int> slot_of;  // key -> slot
    // Host: the blocks' bytes in RAM; disk: the numbering of the file's records (no bytes).
    BlockSlots slots;
    std::vector<std::uint64_t> host_checksum;  // host: [capacity]
    int fd = -1;                               // disk
    std::string path;
  };
  const Tier& tier_at(int tier) const { return tiers_.at(static_cast<std::size_t>(tier)); }
  std::size_t record_bytes() const { return kRecordHeaderBytes + block_bytes_; }
  void open_media();  // host memory and disk files (with bytes)
  void close_files();
  void open_disk(Tier& t, int index);
  // Stores `bytes` as `key` in tier t (a free slot is there: the chain made room). False when the
  // medium refused it (counted; the caller forgets the key).
  bool write(Tier& t, std::uint64_t key, const std::byte* bytes);
  // Reads `key` from tier t into out; false when its check fails (counted when `count_failure`).
  // Frees nothing.
  bool read(Tier& t, std::uint64_t key, std::byte* out, bool count_failure = true);
  void free_slot(Tier& t, std::uint64_t key);

  std::size_t block_bytes_ = 0;
  bool with_bytes_ = false;
  TierChain chain_;
  std::vector<Tier> tiers_;
  std::vector<std::byte> scratch_;  // a block passing down
  std::vector<std::byte> record_;   // a disk record being written
};

// The checksum every tier record carries: 64 bits over the block's key and bytes.
std::uint64_t tier_checksum(std::uint64_t key, const std::byte* bytes, std::size_t n);

std::string tier_medium_name(TierMedium medium);

}  // namespace kvscope

// KvTierStore: host slots in RAM and a disk file of checksummed records, moved as TierChain says.
#include "engine/tiers/kv_tier_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <new>

#include "engine/common/error.h"

namespace kvscope {
namespace {

constexpr std::uint64_t kRecordMagic = 0x3152454954564b53ULL;  // "SKVTIER1", little-endian

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<TierSpec> chain_specs(const std::vector<KvTierOptions>& tiers) {
  std::vector<TierSpec> specs;
  if (tiers.size() > KvTierStore::kMaxTiers) {
    fail_expected("tiers", "at most " + std::to_string(KvTierStore::kMaxTiers) + " tiers",
                  std::to_string(tiers.size()));
  }
  for (std::size_t i = 0; i < tiers.size(); ++i) {
    const KvTierOptions& t = tiers[i];
    if (t.capacity_blocks < 1) {
      fail_expected("tiers[" + std::to_string(i) + "] (" + t.name + "): blocks", "at least 1 block",
                    std::to_string(t.capacity_blocks));
    }
    specs.push_back(TierSpec{t.name, t.capacity_blocks});
  }
  return specs;
}

std::uint64_t load_u64(const std::byte* p) {
  std::uint64_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void store_u64(std::byte* p, std::uint64_t v) {
  std::memcpy(p, &v, sizeof v);
}

std::string errno_text(int err) {
  return std::strerror(err);
}

}  // namespace

std::uint64_t tier_checksum(std::uint64_t key, const std::byte* bytes, std::size_t n) {
  // Each round is a bijection of the state for a given word, so two inputs that differ in one
  // word always end in different states; the final mix spreads the last round's bits.
  constexpr std::uint64_t kMul = 0x9fb21c651e98df25ULL;
  std::uint64_t h = 0x6b7673636f706521ULL ^ (key * kMul) ^ n;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) h = ((h ^ load_u64(bytes + i)) * kMul) ^ (h >> 29);
  std::uint64_t tail = 0;
  std::memcpy(&tail, bytes + i, n - i);
  h = ((h ^ tail) * kMul) ^ (h >> 29);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

std::string tier_medium_name(TierMedium medium) {
  return medium == TierMedium::kHost ? "host" : "disk";
}

KvTierStore::KvTierStore(std::vector<KvTierOptions> tiers, std::size_t block_bytes, bool with_bytes)
    : block_bytes_(block_bytes), with_bytes_(with_bytes), chain_(chain_specs(tiers)) {
  for (std::size_t i = 0; i < tiers.size(); ++i) {
    Tier t;
    t.options = std::move(tiers[i]);
    // Slot numbering only; open_media() gives a host tier its RAM.
    t.slots = BlockSlots(t.options.capacity_blocks, block_bytes_, /*in_ram=*/false);
    tiers_.push_back(std::move(t));
  }
  if (!with_bytes_) return;
  try {
    open_media();
  } catch (...) {
    close_files();  // the destructor does not run when the constructor throws
    throw;
  }
}

void KvTierStore::close_files() {
  for (Tier& t : tiers_) {
    if (t.fd < 0) continue;
    ::close(t.fd);
    ::unlink(t.path.c_str());
    t.fd = -1;
  }
}

void KvTierStore::open_media() {
  scratch_.resize(block_bytes_);
  record_.resize(record_bytes());
  for (std::size_t i = 0; i < tiers_.size(); ++i) {
    Tier& t = tiers_[i];
    if (t.options.medium == TierMedium::kHost) {
      try {
        t.slots = BlockSlots(t.options.capacity_blocks, block_bytes_, /*in_ram=*/true);
      } catch (const std::bad_alloc&) {
        fail_expected("tiers[" + std::to_string(i) + "] (" + t.options.name + "): blocks",
                      "a host tier this machine can map",
                      std::to_string(t.options.capacity_blocks) + " blocks of " +
                          std::to_string(block_bytes_) + " bytes");
      }
      t.host_checksum.assign(static_cast<std::size_t>(t.options.capacity_blocks), 0);
    } else {
      open_disk(t, static_cast<int>(i));
    }
  }
}

KvTierStore::~KvTierStore() {
  close_files();
}

void KvTierStore::open_disk(Tier& t, int index) {
  static std::atomic<int> counter{0};
  std::string dir = t.options.dir;
  std::error_code ec;
  if (dir.empty()) dir = std::filesystem::temp_directory_path(ec).string();
  const std::string where = "tiers[" + std::to_string(index) + "] (" + t.options.name + "): dir";
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) {
    fail_expected(where, "an existing directory for the disk tier's file", "\"" + dir + "\"");
  }
  t.path = (std::filesystem::path(dir) / ("kvscope-tier-" + std::to_string(::getpid()) + "-" +
                                          std::to_string(counter++) + ".kv"))
               .string();
  t.fd = ::open(t.path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (t.fd < 0) {
    const int err = errno;
    throw Error(where, "cannot create the disk tier's file " + t.path + ": " + errno_text(err) +
                           " (expected a writable directory)");
  }
}

std::vector<TierMove> KvTierStore::demote(std::uint64_t key, const std::byte* bytes) {
  if (const std::optional<int> was = chain_.locate(key)) free_slot(tiers_[*was], key);
  // Every tier holds at least one block, so a pass-down never moves `key` itself: it is its first
  // tier's most recently used block.
  std::vector<TierMove> moves = chain_.demote(key);
  // Replay the pass-downs from the bottom up, so each tier has a free slot when one arrives.
  for (auto it = moves.rbegin(); it != moves.rend(); ++it) {
    TierMove& m = *it;
    Tier& from = tiers_[static_cast<std::size_t>(m.from)];
    const bool readable = m.to < 0 || !with_bytes_ || read(from, m.key, scratch_.data());
    free_slot(from, m.key);
    if (m.to < 0) continue;
    if (!readable || !write(tiers_[static_cast<std::size_t>(m.to)], m.key, scratch_.data())) {
      chain_.erase(m.key);
      m.to = -1;  // lost on the way
    }
  }
  if (!write(tiers_[0], key, bytes)) chain_.erase(key);
  return moves;
}

std::optional<int> KvTierStore::load(std::uint64_t key, std::byte* out) {
  const std::optional<int> tier = chain_.find(key);
  if (!tier) return std::nullopt;
  Tier& t = tiers_[static_cast<std::size_t>(*tier)];
  if (with_bytes_ && !read(t, key, out)) {
    free_slot(t, key);
    chain_.erase(key);
    return std::nullopt;
  }
  if (!with_bytes_) ++t.io.blocks_read;
  return tier;
}

bool KvTierStore::write(Tier& t, std::uint64_t key, const std::byte* bytes) {
  if (!t.slots.lowest_free()) {
    throw InternalError("KvTierStore", t.options.name +
                                           " has no free slot for a block its chain "
                                           "placed there");
  }
  const int slot = *t.slots.lowest_free();
  if (!with_bytes_) {
    t.slots.take();
    t.slot_of[key] = slot;
    ++t.io.blocks_written;
    return true;
  }
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t sum = tier_checksum(key, bytes, block_bytes_);
  if (t.options.medium == TierMedium::kHost) {
    std::memcpy(t.slots.bytes(slot), bytes, block_bytes_);
    t.host_checksum[static_cast<std::size_t>(slot)] = sum;
  } else {
    std::vector<std::byte>& record = record_;
    store_u64(record.data(), kRecordMagic);
    store_u64(record.data() + 8, key);
    store_u64(record.data() + 16, block_bytes_);
    store_u64(record.data() + 24, sum);
    std::memcpy(record.data() + kRecordHeaderBytes, bytes, block_bytes_);
    const auto offset = static_cast<off_t>(slot) * static_cast<off_t>(record_bytes());
    const ssize_t n = ::pwrite(t.fd, record.data(), record.size(), offset);
    const int err = errno;
    if (n != static_cast<ssize_t>(record.size())) {
      ++t.io.failed_writes;
      if (t.io.first_failure.empty()) {
        t.io.first_failure = t.path + ": writing a block failed (" +
                             (n < 0 ? errno_text(err)
                                    : "wrote " + std::to_string(n) + " of " +
                                          std::to_string(record.size()) + " bytes") +
                             "); the block was dropped and is recomputed when needed";
      }
      return false;
    }
    // Durable, and out of the page cache: a later read measures the device, not RAM.
    ::fdatasync(t.fd);
    ::posix_fadvise(t.fd, offset, static_cast<off_t>(record.size()), POSIX_FADV_DONTNEED);
  }
  t.io.write_seconds += seconds_since(start);
  ++t.io.blocks_written;
  t.slots.take();
  t.slot_of[key] = slot;
  return true;
}

bool KvTierStore::peek(std::uint64_t key, std::byte* out) {
  const std::optional<int> tier = chain_.locate(key);
  if (!tier) return false;
  if (!with_bytes_) return true;
  return read(tiers_[static_cast<std::size_t>(*tier)], key, out, false);
}

bool KvTierStore::read(Tier& t, std::uint64_t key, std::byte* out, bool count_failure) {
  const auto found = t.slot_of.find(key);
  if (found == t.slot_of.end()) {
    throw InternalError("KvTierStore", t.options.name + " has no slot for a block its chain holds");
  }
  const int slot = found->second;
  const auto start = std::chrono::steady_clock::now();
  std::string problem;
  if (t.options.medium == TierMedium::kHost) {
    std::memcpy(out, t.slots.bytes(slot), block_bytes_);
    if (tier_checksum(key, out, block_bytes_) != t.host_checksum[static_cast<std::size_t>(slot)])
      problem = "checksum mismatch";
  } else {
    std::byte header[kRecordHeaderBytes];
    const auto offset = static_cast<off_t>(slot) * static_cast<off_t>(record_bytes());
    const ssize_t h = ::pread(t.fd, header, sizeof header, offset);
    const ssize_t n = h == static_cast<ssize_t>(sizeof header)
                          ? ::pread(t.fd, out, block_bytes_, offset + kRecordHeaderBytes)
                          : -1;
    if (n != static_cast<ssize_t>(block_bytes_)) {
      problem = "short record (torn write)";
    } else if (load_u64(header) != kRecordMagic || load_u64(header + 8) != key ||
               load_u64(header + 16) != block_bytes_) {
      problem = "bad record header";
    } else if (tier_checksum(key, out, block_bytes_) != load_u64(header + 24)) {
      problem = "checksum mismatch";
    }
  }
  t.io.read_seconds += seconds_since(start);
  if (!problem.empty()) {
    if (!count_failure) return false;
    ++t.io.corrupt_reads;
    if (t.io.first_failure.empty()) {
      t.io.first_failure = (t.path.empty() ? t.options.name : t.path) + ": block " +
                           std::to_string(slot) + " failed its check (" + problem +
                           "); it was dropped and recomputed, never served";
    }
    return false;
  }
  ++t.io.blocks_read;
  return true;
}

void KvTierStore::free_slot(Tier& t, std::uint64_t key) {
  const auto it = t.slot_of.find(key);
  if (it == t.slot_of.end()) return;
  t.slots.release(it->second);
  t.slot_of.erase(it);
}

std::optional<std::int64_t> KvTierStore::record_offset(std::uint64_t key) const {
  const std::optional<int> tier = chain_.locate(key);
  if (!tier) return std::nullopt;
  const Tier& t = tier_at(*tier);
  const auto it = t.slot_of.find(key);
  if (t.options.medium != TierMedium::kDisk || it == t.slot_of.end()) return std::nullopt;
  return static_cast<std::int64_t>(it->second) * static_cast<std::int64_t>(record_bytes());
}

void KvTierStore::check_invariants() const {
  chain_.check_invariants();
  for (int k = 0; k < num_tiers(); ++k) {
    const Tier& t = tier_at(k);
    if (static_cast<std::int64_t>(t.slot_of.size()) != chain_.held(k) ||
        t.slot_of.size() + static_cast<std::size_t>(t.slots.num_free()) !=
            static_cast<std::size_t>(t.options.capacity_blocks)) {
      throw InternalError("KvTierStore",
                          t.options.name + ": " + std::to_string(t.slot_of.size()) +
                              " slots used and " +
                              std::to_string(static_cast<std::size_t>(t.slots.num_free())) +
                              " free, but the chain holds " + std::to_string(chain_.held(k)) +
                              " of " + std::to_string(t.options.capacity_blocks));
    }
    for (const auto& [key, slot] : t.slot_of) {
      if (chain_.locate(key) != k) {
        throw InternalError("KvTierStore", t.options.name +
                                               " has a slot for a block the chain "
                                               "does not place there");
      }
    }
  }
}

}  // namespace kvscope

// TierPrefetcher against the stepping thread, in a binary small enough for the ThreadSanitizer
// build (the prefetcher, the tier store and what they use; no engine): one thread keeps demoting
// blocks through a host and a disk tier while the IO thread reads ahead, both under the store's
// mutex. Every block the prefetcher staged must hold exactly its key's bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <mutex>
#include <vector>

#include "engine/tiers/tier_prefetch.h"

namespace kvscope {
namespace {

constexpr std::size_t kBlockBytes = 4096;

// A block's bytes are a function of its key, as a chain key names a block's contents.
std::vector<std::byte> block_of(std::uint64_t key) {
  std::vector<std::byte> b(kBlockBytes);
  for (std::size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<std::byte>((key * 131 + i * 7) & 0xff);
  return b;
}

TEST(TierPrefetch, StagedBlocksHoldTheirBytesWhileTheTiersChangeUnderneath) {
  const std::string dir = std::filesystem::temp_directory_path().string();
  KvTierStore store({{"host", TierMedium::kHost, 8, ""}, {"disk", TierMedium::kDisk, 32, dir}},
                    kBlockBytes, true);
  std::mutex store_mutex;
  TierPrefetcher prefetcher(store, store_mutex);
  std::uint64_t next = 1;
  auto demote = [&](int n) {
    for (int i = 0; i < n; ++i, ++next) {
      const std::vector<std::byte> b = block_of(next);
      const std::lock_guard<std::mutex> lock(store_mutex);
      store.demote(next, b.data());
    }
  };
  demote(20);
  int staged = 0;
  for (int round = 0; round < 30; ++round) {
    // Ask for the 12 most recent blocks, then keep demoting while the IO thread reads them:
    // some pass from host to disk, the oldest fall off the end.
    std::vector<std::uint64_t> keys;
    for (std::uint64_t k = next - 12; k < next; ++k) keys.push_back(k);
    const std::shared_ptr<TierPrefetcher::Job> job = prefetcher.submit(keys);
    demote(3);
    prefetcher.wait(job);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (!job->staged[i]) continue;
      ++staged;
      ASSERT_EQ(
          std::memcmp(job->bytes.data() + i * kBlockBytes, block_of(keys[i]).data(), kBlockBytes),
          0)
          << "block " << keys[i];
    }
  }
  EXPECT_GT(staged, 0);
  const std::lock_guard<std::mutex> lock(store_mutex);
  EXPECT_NO_THROW(store.check_invariants());
  EXPECT_EQ(store.io(1).corrupt_reads, 0);
}

}  // namespace
}  // namespace kvscope

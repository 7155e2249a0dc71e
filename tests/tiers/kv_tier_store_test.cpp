// KvTierStore: blocks round-trip the host and disk tiers byte for byte in every KV format; a torn,
// corrupt or foreign disk record is caught by its check and never served; a disk that refuses a
// write drops that block and the store goes on; a missing directory is a one-line error.
#include "engine/tiers/kv_tier_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>

#include "engine/common/error.h"
#include "engine/kv/kv_storage.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

std::vector<KvTierOptions> host_and_disk(int host, int disk) {
  return {{"host", TierMedium::kHost, host, ""},
          {"disk", TierMedium::kDisk, disk, test::temp_path("")}};
}

std::vector<std::byte> random_block(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> b(n);
  for (std::byte& x : b) x = static_cast<std::byte>(rng() & 0xff);
  return b;
}

// Overwrites `n` bytes of `path` at `offset` with `byte`.
void scribble(const std::string& path, std::int64_t offset, std::size_t n, unsigned char byte) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << path;
  const std::vector<unsigned char> bytes(n, byte);
  ASSERT_EQ(::pwrite(fd, bytes.data(), n, offset), static_cast<ssize_t>(n));
  ::close(fd);
}

TEST(KvTierStore, BlocksRoundTripHostAndDiskByteForByteInEveryKvFormat) {
  for (const std::string& name : kv_format_names()) {
    SCOPED_TRACE(name);
    KvLayout layout;
    layout.n_layers = 2;
    layout.kv_heads = 2;
    layout.head_dim = 64;
    layout.block_size = 32;
    layout.num_blocks = 8;
    layout.k_format = parse_kv_format(name, "test");
    layout.v_format = layout.k_format;
    KvStorage pool(layout);
    const std::size_t bytes = layout.block_bytes();
    // Three blocks of the pool, filled through the pool's own block writes.
    std::vector<std::vector<std::byte>> blocks;
    for (int b = 0; b < 3; ++b) {
      blocks.push_back(random_block(bytes, 17u * static_cast<unsigned>(b) + 1));
      pool.write_block(BlockId(b), blocks.back().data());
    }
    KvTierStore store(host_and_disk(1, 2), bytes, true);
    std::vector<std::byte> out(bytes);
    for (int b = 0; b < 3; ++b) {
      pool.read_block(BlockId(b), out.data());
      store.demote(100 + static_cast<std::uint64_t>(b), out.data());
    }
    // host keeps the last one; the first two went down to disk with their bytes.
    EXPECT_EQ(store.locate(102), 0);
    EXPECT_EQ(store.locate(100), 1);
    EXPECT_EQ(store.locate(101), 1);
    for (int b = 0; b < 3; ++b) {
      std::fill(out.begin(), out.end(), std::byte{0});
      ASSERT_TRUE(store.load(100 + static_cast<std::uint64_t>(b), out.data()).has_value());
      pool.write_block(BlockId(4 + b), out.data());  // back into the pool, in another block
      std::vector<std::byte> again(bytes);
      pool.read_block(BlockId(4 + b), again.data());
      EXPECT_EQ(again, blocks[static_cast<std::size_t>(b)]);
    }
    EXPECT_EQ(store.io(0).blocks_written, 3);
    EXPECT_EQ(store.io(1).blocks_written, 2);
    EXPECT_EQ(store.io(0).blocks_read, 3);  // two pass-downs, one load
    EXPECT_EQ(store.io(1).blocks_read, 2);
    EXPECT_EQ(store.io(1).corrupt_reads, 0);
    // The disk file holds at most its capacity of records.
    EXPECT_LE(std::filesystem::file_size(store.file_path(1)),
              2 * (KvTierStore::kRecordHeaderBytes + bytes));
    EXPECT_NO_THROW(store.check_invariants());
  }
}

TEST(KvTierStore, ACorruptTornOrForeignDiskRecordIsDroppedNeverServed) {
  const std::size_t bytes = 4096 + 5;  // a tail the checksum covers too
  KvTierStore store(host_and_disk(1, 4), bytes, true);
  std::vector<std::vector<std::byte>> blocks;
  for (std::uint64_t k = 1; k <= 5; ++k) {
    blocks.push_back(random_block(bytes, static_cast<unsigned>(k)));
    store.demote(k, blocks.back().data());
  }
  const std::string path = store.file_path(1);
  ASSERT_FALSE(path.empty());
  // 1: one flipped payload byte, the last one (in the checksum's tail).
  scribble(path, *store.record_offset(1) + KvTierStore::kRecordHeaderBytes + bytes - 1, 1,
           static_cast<unsigned char>(std::to_integer<unsigned>(blocks[0].back()) ^ 0x01));
  // 2: its header's key overwritten.
  scribble(path, *store.record_offset(2) + 8, 8, 0xab);
  std::vector<std::byte> out(bytes);
  EXPECT_FALSE(store.load(1, out.data()).has_value());
  EXPECT_FALSE(store.load(2, out.data()).has_value());
  EXPECT_EQ(store.io(1).corrupt_reads, 2);
  EXPECT_NE(store.io(1).first_failure.find("failed its check (checksum mismatch)"),
            std::string::npos)
      << store.io(1).first_failure;
  EXPECT_FALSE(store.locate(1).has_value());  // forgotten, so the caller recomputes it
  // 4 is the last record in the file: tear it after its header.
  const std::int64_t torn = *store.record_offset(4);
  ASSERT_EQ(torn + static_cast<std::int64_t>(KvTierStore::kRecordHeaderBytes + bytes),
            static_cast<std::int64_t>(std::filesystem::file_size(path)));
  std::filesystem::resize_file(path, static_cast<std::uintmax_t>(torn) + 40);
  EXPECT_FALSE(store.load(4, out.data()).has_value());
  EXPECT_EQ(store.io(1).corrupt_reads, 3);
  // The untouched record still reads back exactly.
  ASSERT_EQ(store.load(3, out.data()), 1);
  EXPECT_EQ(out, blocks[2]);
  EXPECT_NO_THROW(store.check_invariants());
}

TEST(KvTierStore, ADiskThatRefusesAWriteDropsThatBlockAndTheStoreGoesOn) {
  const std::size_t bytes = 8192;
  const std::size_t record = KvTierStore::kRecordHeaderBytes + bytes;
  KvTierStore store(host_and_disk(1, 3), bytes, true);
  // A file size limit of one and a half records: the second record's write comes up short.
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto previous = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = record + record / 2;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  for (std::uint64_t k = 1; k <= 3; ++k) store.demote(k, random_block(bytes, 7).data());
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, previous);
  EXPECT_EQ(store.io(1).blocks_written, 1);
  EXPECT_EQ(store.io(1).failed_writes, 1);
  EXPECT_NE(store.io(1).first_failure.find("writing a block failed"), std::string::npos)
      << store.io(1).first_failure;
  EXPECT_EQ(store.locate(1), 1);
  EXPECT_FALSE(store.locate(2).has_value());  // dropped: a later hit recomputes it
  std::vector<std::byte> out(bytes);
  EXPECT_EQ(store.load(1, out.data()), 1);
  EXPECT_EQ(out, random_block(bytes, 7));
  EXPECT_NO_THROW(store.check_invariants());
}

TEST(KvTierStore, AMissingDirectoryOrAnEmptyTierIsAOneLineError) {
  std::vector<KvTierOptions> tiers = host_and_disk(2, 2);
  tiers[1].dir = "/nonexistent/kvscope-tiers";
  EXPECT_EQ(test::error_of([&] { KvTierStore store(tiers, 64, true); }),
            "tiers[1] (disk): dir: expected an existing directory for the disk tier's file, got "
            "\"/nonexistent/kvscope-tiers\"");
  tiers = host_and_disk(0, 2);
  EXPECT_EQ(test::error_of([&] { KvTierStore store(tiers, 64, true); }),
            "tiers[0] (host): blocks: expected at least 1 block, got 0");
  // Without bytes there is no file at all, so no directory is looked at.
  tiers = host_and_disk(1, 1);
  tiers[1].dir = "/nonexistent/kvscope-tiers";
  KvTierStore bookkeeping(tiers, 64, false);
  bookkeeping.demote(1, nullptr);
  bookkeeping.demote(2, nullptr);
  EXPECT_EQ(bookkeeping.load(1, nullptr), 1);
  EXPECT_TRUE(bookkeeping.file_path(1).empty());
  EXPECT_NO_THROW(bookkeeping.check_invariants());
}

int tier_files(const std::string& dir) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    n += entry.path().filename().string().rfind("kvscope-tier-", 0) == 0;
  return n;
}

TEST(KvTierStore, AStoreThatFailsToOpenLeavesNoFileBehind) {
  const std::string dir = test::temp_path("");
  const int before = tier_files(dir);
  std::vector<KvTierOptions> tiers = {{"disk", TierMedium::kDisk, 2, dir},
                                      {"disk", TierMedium::kDisk, 2, "/nonexistent/kvscope"}};
  EXPECT_NE(test::error_of([&] { KvTierStore store(tiers, 64, true); }), "");
  EXPECT_EQ(tier_files(dir), before);
  tiers.resize(9, tiers[0]);
  EXPECT_EQ(test::error_of([&] { KvTierStore store(tiers, 64, true); }),
            "tiers: expected at most 8 tiers, got 9");
}

TEST(KvTierStore, TheFileIsRemovedWithTheStore) {
  std::string path;
  {
    KvTierStore store(host_and_disk(1, 1), 64, true);
    path = store.file_path(1);
    EXPECT_TRUE(std::filesystem::exists(path));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace kvscope

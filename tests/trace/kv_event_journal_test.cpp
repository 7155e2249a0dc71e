// The KV-event journal (stream.kvj): what attach writes replays into the same model state, a
// journal is whole or absent, and a file that is not one (or is cut short) is refused by offset.
#include "engine/trace/kv_journal.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/common/error.h"
#include "tests/trace/kv_event_payloads.h"

namespace kvscope {
namespace {

using test::batch_array;
using test::cleared_array;
using test::removed_array;
using test::stored_array;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("kvscope_journal_" + std::to_string(getpid()) + "_" + name))
      .string();
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void apply(KvEventModel& m, int rank, const std::string& payload, std::int64_t seq) {
  KvEventBatch b;
  std::string error;
  if (decode_kv_event_batch(payload, b, error))
    m.apply(rank, b, seq);
  else
    m.apply_undecodable(rank);
}

TEST(KvEventJournal, ReplayRebuildsTheSameModel) {
  const std::string path = temp_path("same.kvj");
  const std::string a = batch_array(1.0, {stored_array({1, 2}, std::nullopt, 16)});
  const std::string b = batch_array(2.0, {removed_array({2}), stored_array({3}, 1, 16)}, 1);
  const std::string bad = "\xc1";  // not msgpack
  const std::string c = batch_array(3.0, {stored_array({9}, std::nullopt, 16), cleared_array()});
  KvEventModel direct;
  {
    KvJournalWriter w(path, 1 << 20);
    w.batch(0, 0, false, a);
    apply(direct, 0, a, 0);
    w.batch(1, 5, true, b);
    apply(direct, 1, b, 5);
    w.batch(0, 1, false, bad);
    apply(direct, 0, bad, 1);
    w.restart(1);
    direct.restart(1);
    w.batch(0, 2, false, c);
    apply(direct, 0, c, 2);
    EXPECT_FALSE(std::filesystem::exists(path));  // only the .part while attached
    w.finish();
  }
  ASSERT_TRUE(std::filesystem::exists(path));
  KvEventModel replayed;
  const KvJournalStats stats = replay_kv_journal(path, replayed);
  EXPECT_EQ(stats.batches, 4);
  EXPECT_EQ(stats.restarts, 1);
  EXPECT_EQ(stats.decode_errors, 1);
  EXPECT_EQ(replayed.totals().blocks_stored, direct.totals().blocks_stored);
  EXPECT_EQ(replayed.totals().blocks_removed, direct.totals().blocks_removed);
  EXPECT_EQ(replayed.totals().blocks_cleared, direct.totals().blocks_cleared);
  EXPECT_EQ(replayed.totals().live, direct.totals().live);
  EXPECT_EQ(replayed.live_by_rank_medium(), direct.live_by_rank_medium());
  EXPECT_EQ(replayed.recorded_events(), direct.recorded_events());
  std::filesystem::remove(path);
}

TEST(KvEventJournal, AnUnfinishedJournalLeavesNothingBehind) {
  const std::string path = temp_path("unfinished.kvj");
  {
    KvJournalWriter w(path, 1 << 20);
    w.batch(0, 0, false, batch_array(1.0, {}));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".part"));
}

TEST(KvEventJournal, ItStopsAtItsCapAndSaysSo) {
  const std::string path = temp_path("cap.kvj");
  KvJournalWriter w(path, 64);
  w.batch(0, 0, false, std::string(20, 'x'));  // 8 + 16 + 20 = 44 bytes
  EXPECT_FALSE(w.truncated());
  w.batch(0, 1, false, std::string(20, 'x'));  // would be 80
  EXPECT_TRUE(w.truncated());
  w.finish();
  EXPECT_EQ(slurp(path).size(), 44u);
  std::filesystem::remove(path);
}

TEST(KvEventJournal, OtherFilesAndCutRecordsAreRefusedByOffset) {
  const std::string path = temp_path("bad.kvj");
  auto refused = [&](const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
    KvEventModel m;
    try {
      replay_kv_journal(path, m);
    } catch (const Error& e) {
      std::filesystem::remove(path);
      return std::string(e.what());
    }
    std::filesystem::remove(path);
    return std::string("(accepted)");
  };
  EXPECT_EQ(refused("KVSCOPER"),
            path +
                ": expected a KV-event journal (starting \"KVSJRNL1\", written by kvscope "
                "attach as stream.kvj), got another kind of file");
  EXPECT_EQ(refused(std::string("KVSJRNL1") + std::string("\x01\x00", 2)),
            path +
                ": record at byte 8: expected a 16-byte record header, got 2 bytes (the file "
                "is cut short)");
  std::string head("KVSJRNL1\x03", 9);
  head.append(15, '\0');
  EXPECT_EQ(refused(head),
            path + ": record at byte 8: expected kind 1 (batch) or 2 (restart), got 3");
  std::string cut("KVSJRNL1\x01", 9);
  cut.append(11, '\0');
  cut.append("\x10\x00\x00\x00", 4);
  cut.append("abc");
  EXPECT_EQ(refused(cut), path +
                              ": record at byte 8: expected 16 payload bytes, got 3 (the file "
                              "is cut short)");
  KvEventModel m;
  EXPECT_THROW(replay_kv_journal(temp_path("missing.kvj"), m), Error);
}

}  // namespace
}  // namespace kvscope

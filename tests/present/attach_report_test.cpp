// Attach's words and JSON (present/attach_report.h) from hand-made state: a KvAttachStatus as
// KvEventClient::status() gives it and a KvEventModel fed decoded batches. No sockets and no
// msgpack: this runs in a build without attach too. tests/trace/kv_event_client_test.cpp checks
// the same text against a live client.
#include "present/attach_report.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/trace/kv_event_builders.h"

namespace kvscope {
namespace {

KvStreamEvent stored(std::vector<std::uint64_t> hashes) {
  KvStreamEvent e;
  e.kind = KvEventKind::kBlockStored;
  e.block_hashes = std::move(hashes);
  e.block_size = 16;
  e.num_token_ids = static_cast<std::int64_t>(e.block_hashes.size()) * 16;
  return e;
}

KvRankStats rank_at(int rank, std::string endpoint, KvConnection c) {
  KvRankStats r;
  r.rank = rank;
  r.endpoint = std::move(endpoint);
  r.connection = c;
  return r;
}

// Two ranks, nothing received yet.
KvAttachStatus waiting_status() {
  KvAttachStatus s;
  s.endpoint = "tcp://127.0.0.1:5557";
  s.topic = "other";
  s.dp_ranks = 2;
  s.ranks = {rank_at(0, "tcp://127.0.0.1:5557", KvConnection::kDisconnected),
             rank_at(1, "tcp://127.0.0.1:5558", KvConnection::kNotZeroMq)};
  s.ranks[0].replaying = true;
  s.totals.rank = -1;
  s.totals.replaying = true;
  return s;
}

// Two ranks that received three batches, of which some were lost; rank 0 holds block 2, rank 1
// block 3.
struct Flowing {
  KvAttachStatus status;
  KvEventModel model;
};

Flowing flowing() {
  Flowing f;
  f.model.apply(0, test::batch(1.0, {stored({1, 2})}), 0);
  f.model.apply(1, test::batch(1.0, {stored({3})}), 0);
  f.model.apply(0, test::batch(2.0, {test::removed({1})}), 3);
  KvAttachStatus& s = f.status;
  s.endpoint = "tcp://127.0.0.1:5557";
  s.replay_endpoint = "tcp://127.0.0.1:5567";
  s.dp_ranks = 2;
  s.ranks = {rank_at(0, "tcp://127.0.0.1:5557", KvConnection::kConnected),
             rank_at(1, "tcp://127.0.0.1:5558", KvConnection::kConnected)};
  s.ranks[0].batches = 2;
  s.ranks[0].last_seq = 3;
  s.ranks[0].lost = 3;
  s.ranks[0].lost_before_attach = 1;
  s.ranks[0].lost_mid_stream = 2;
  s.ranks[1].batches = 1;
  s.totals = s.ranks[0];
  s.totals.rank = -1;
  s.totals.batches = 3;
  s.totals.gaps = 1;
  s.totals.replayed = 2;
  s.totals.restarts = 1;
  s.totals.lag_s = 0.25;
  s.totals.replaying = true;
  return f;
}

TEST(AttachReport, LostBatchesInWords) {
  EXPECT_EQ(kv_lost_causes(0, 0, 0), "");
  EXPECT_EQ(kv_lost_causes(10, 0, 2), "10 before attach, never replayed, 2 mid-stream gap");
  EXPECT_EQ(kv_lost_causes(1, 2, 3),
            "1 before attach, never replayed, 2 gone from the replay buffer, 3 mid-stream gap");
  KvRankStats r;
  r.lost = 12;
  r.lost_before_attach = 10;
  r.lost_mid_stream = 2;
  EXPECT_EQ(kv_lost_text(r), "12 (10 before attach, never replayed, 2 mid-stream gap)");
  EXPECT_EQ(kv_lost_json(r),
            (nlohmann::json{{"before_attach", 10}, {"replay_expired", 0}, {"mid_stream", 2}}));
  r.lost_before_attach = r.lost_mid_stream = 0;  // lost, causes not known: the number alone
  EXPECT_EQ(kv_lost_text(r), "12");
}

TEST(AttachReport, ConnectionNames) {
  EXPECT_STREQ(kv_connection_name(KvConnection::kConnected), "connected");
  EXPECT_STREQ(kv_connection_name(KvConnection::kDisconnected), "not connected");
  EXPECT_STREQ(kv_connection_name(KvConnection::kListening), "listening");
  EXPECT_STREQ(kv_connection_name(KvConnection::kHandshaking), "handshaking");
  EXPECT_STREQ(kv_connection_name(KvConnection::kNotZeroMq), "not ZeroMQ");
  EXPECT_STREQ(kv_connection_name(KvConnection::kUnknown), "unknown");
}

TEST(AttachReport, BeforeTheFirstBatchTheLineSaysWhyPerRank) {
  KvAttachStatus s = waiting_status();
  const KvEventModel empty;
  EXPECT_EQ(kv_attach_status_line(s, empty),
            "no batch yet: rank 0 tcp://127.0.0.1:5557 not connected (no publisher listening?), "
            "replay asked rank 1 tcp://127.0.0.1:5558 not ZeroMQ (something answers at that "
            "port, but not a ZeroMQ publisher: the engine's --kv-events-config endpoint?)");
  s.totals.other_topics = 2;
  s.totals.last_other_topic = "kv-events";
  EXPECT_NE(kv_attach_status_line(s, empty).find(
                "; 2 batches on topic \"kv-events\", not the subscribed topic \"other\""),
            std::string::npos)
      << kv_attach_status_line(s, empty);
  s.ranks.resize(1);
  s.ranks[0].replaying = false;
  const std::vector<std::pair<KvConnection, std::string>> hints = {
      {KvConnection::kConnected, "connected (engine idle?)"},
      {KvConnection::kListening, "listening (no engine connected yet)"},
      {KvConnection::kHandshaking, "connected, waiting for the ZeroMQ handshake"},
      {KvConnection::kUnknown, "waiting"}};
  s.totals.other_topics = 0;
  for (const auto& [connection, hint] : hints) {
    s.ranks[0].connection = connection;
    EXPECT_EQ(kv_attach_status_line(s, empty), "no batch yet: rank 0 tcp://127.0.0.1:5557 " + hint);
  }
}

TEST(AttachReport, WhileBatchesFlowTheLineCountsThem) {
  Flowing f = flowing();
  EXPECT_EQ(kv_attach_status_line(f.status, f.model),
            "batches 3  stored 3  live 2 [r0 1 r1 1]  gaps 1  replayed 2  lost 3 (1 before "
            "attach, never replayed, 2 mid-stream gap)  decode errors 0  restarts 1  lag 0.25 s  "
            "(replaying)");
  // One rank: no per-rank live blocks; nothing lost: no "lost"; no replay running.
  f.status.ranks.resize(1);
  f.status.totals.lost = f.status.totals.lost_before_attach = f.status.totals.lost_mid_stream = 0;
  f.status.totals.replaying = false;
  EXPECT_EQ(kv_attach_status_line(f.status, f.model),
            "batches 3  stored 3  live 2  gaps 1  replayed 2  decode errors 0  restarts 1  lag "
            "0.25 s");
}

TEST(AttachReport, SummaryJsonHasEveryKeyAndPerRankState) {
  Flowing f = flowing();
  nlohmann::json s = kv_attach_summary_json(f.status, f.model);
  std::vector<std::string> keys;
  for (const auto& [key, value] : s.items()) keys.push_back(key);
  // Every key of the summary (nlohmann::json keeps them sorted).
  EXPECT_EQ(keys, (std::vector<std::string>{"bad_frames",
                                            "batches",
                                            "bind",
                                            "blocks_cleared",
                                            "blocks_removed",
                                            "blocks_stored",
                                            "clear_scope",
                                            "decode_errors",
                                            "dp",
                                            "duplicates",
                                            "endpoint",
                                            "events",
                                            "gaps",
                                            "journal",
                                            "last_decode_error",
                                            "live_blocks",
                                            "live_blocks_by_group",
                                            "live_blocks_by_medium",
                                            "live_blocks_by_ownership",
                                            "live_blocks_by_rank",
                                            "lost",
                                            "lost_by_cause",
                                            "other_topics",
                                            "peak_live_blocks",
                                            "placeholder_blocks",
                                            "rank_mismatches",
                                            "ranks",
                                            "recording",
                                            "replay_endpoint",
                                            "replay_frames",
                                            "replay_requests",
                                            "replay_timeouts",
                                            "replayed",
                                            "restarts",
                                            "restored",
                                            "short_lived",
                                            "skipped_events",
                                            "skipped_fields",
                                            "state_exact",
                                            "topic",
                                            "unknown_parents",
                                            "unknown_removals",
                                            "untracked_blocks"}));
  EXPECT_EQ(s["dp"], 2);
  EXPECT_EQ(s["batches"], 3);
  EXPECT_EQ(s["events"],
            (nlohmann::json{{"BlockStored", 2}, {"BlockRemoved", 1}, {"AllBlocksCleared", 0}}));
  EXPECT_EQ(s["blocks_stored"], 3);
  EXPECT_EQ(s["live_blocks"], 2);
  EXPECT_EQ(s["live_blocks_by_rank"], (nlohmann::json{{"0", 1}, {"1", 1}}));
  EXPECT_EQ(s["lost"], 3);
  EXPECT_EQ(s["lost_by_cause"],
            (nlohmann::json{{"before_attach", 1}, {"replay_expired", 0}, {"mid_stream", 2}}));
  EXPECT_EQ(s["state_exact"], false);
  EXPECT_TRUE(s["journal"].is_null());
  ASSERT_EQ(s["ranks"].size(), 2u);
  EXPECT_EQ(s["ranks"][0]["connection"], "connected");
  EXPECT_EQ(s["ranks"][0]["last_seq"], 3);
  EXPECT_TRUE(s["ranks"][1]["last_seq"].is_null());
  EXPECT_EQ(s["ranks"][0]["live_blocks"], 1);
  EXPECT_EQ(s["ranks"][0]["blocks_removed"], 1);
  EXPECT_EQ(s["ranks"][1]["state_exact"], true);
  f.status.journal = KvJournalStatus{"out/stream.kvj", 1234, true};
  s = kv_attach_summary_json(f.status, f.model);
  EXPECT_EQ(s["journal"],
            (nlohmann::json{{"path", "out/stream.kvj"}, {"bytes", 1234}, {"truncated", true}}));
}

}  // namespace
}  // namespace kvscope

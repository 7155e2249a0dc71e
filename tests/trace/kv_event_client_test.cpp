// KvEventClient against an in-test publisher thread that speaks the engines' exact framing: a
// publisher socket sending [topic, seq 8B big-endian, payload] and a ROUTER replay socket that
// answers [identity, "", start_seq] with ["", seq, payload]... then ["", 0xFF x 8, ""]. Every wait
// is a poll with a deadline; nothing sleeps to synchronise.
#include "engine/trace/kv_event_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/common/error.h"
#include "present/attach_report.h"
#include "tests/trace/kv_event_payloads.h"
#include "tests/trace/kv_test_publisher.h"

namespace kvscope {
namespace {

using Clock = std::chrono::steady_clock;
using test::batch_array;
using test::removed_array;
using test::stored_array;

using test::be64;
using test::Publisher;

// Polls the client until `done` or the deadline; false on timeout.
template <typename F>
bool until(KvEventClient& c, F done, double seconds = 10.0) {
  const Clock::time_point end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(seconds));
  while (!done()) {
    if (Clock::now() > end) return false;
    c.poll(10);
  }
  return true;
}

// What `kvscope attach` and kvscope-ui show for the client's state (present/attach_report.h).
std::string status_line(const KvEventClient& c) {
  return kv_attach_status_line(c.status(), c.model());
}
nlohmann::json summary(const KvEventClient& c) {
  return kv_attach_summary_json(c.status(), c.model());
}

KvAttachConfig config_for(const Publisher& p, int dp = 1) {
  KvAttachConfig cfg;
  cfg.endpoint = p.endpoint();
  cfg.replay_endpoint = p.replay_endpoint();
  cfg.dp_ranks = dp;
  cfg.replay_timeout_ms = 3000;
  return cfg;
}

std::string store(std::vector<test::WireHash> hashes,
                  std::optional<test::WireHash> parent = std::nullopt) {
  return batch_array(1.0, {stored_array(hashes, parent, 16)});
}

// The client is attached: subscribed, and its catch-up replay (if any) answered and done.
bool attached(KvEventClient& c, const Publisher& p) {
  return until(c, [&] {
    return p.subscriptions() > 0 && (p.replay_endpoint().empty() || p.replay_requests() > 0) &&
           !c.ranks()[0].replaying;
  });
}

TEST(KvEventClient, LiveBatchesAreAppliedInOrder) {
  Publisher p("tcp://127.0.0.1:*", "");
  KvEventClient c(config_for(p));
  ASSERT_TRUE(attached(c, p));
  p.publish(store({1}));
  p.publish(store({2}, 1));
  p.publish(batch_array(2.0, {removed_array({1})}));
  ASSERT_TRUE(until(c, [&] { return c.totals().batches == 3; }));
  const KvRankStats& r = c.ranks()[0];
  EXPECT_EQ(r.gaps, 0);
  EXPECT_EQ(r.replayed, 0);
  EXPECT_EQ(r.last_seq, 2u);
  EXPECT_EQ(r.connection, KvConnection::kConnected);
  EXPECT_EQ(c.model().totals().live, 1);
  EXPECT_EQ(c.model().totals().blocks_stored, 2);
  EXPECT_NE(status_line(c).find("batches 3"), std::string::npos) << status_line(c);
  // The same state as plain data: what was asked for, the rank, the totals; no journal asked.
  const KvAttachStatus st = c.status();
  EXPECT_EQ(st.endpoint, p.endpoint());
  EXPECT_EQ(st.dp_ranks, 1);
  EXPECT_FALSE(st.bind);
  ASSERT_EQ(st.ranks.size(), 1u);
  EXPECT_EQ(st.ranks[0].batches, 3);
  EXPECT_EQ(st.ranks[0].connection, KvConnection::kConnected);
  EXPECT_EQ(st.totals.rank, -1);
  EXPECT_EQ(st.totals.batches, 3);
  EXPECT_FALSE(st.journal.has_value());
}

// With a journal, the status says where it goes and how much it holds.
TEST(KvEventClient, TheStatusNamesTheJournal) {
  Publisher p("tcp://127.0.0.1:*", "");
  KvAttachConfig cfg = config_for(p);
  cfg.journal_path = testing::TempDir() + "kvscope-status-journal.kvj";
  KvEventClient c(cfg);
  ASSERT_TRUE(attached(c, p));
  p.publish(store({1}));
  ASSERT_TRUE(until(c, [&] { return c.totals().batches == 1; }));
  const KvAttachStatus st = c.status();
  ASSERT_TRUE(st.journal.has_value());
  EXPECT_EQ(st.journal->path, cfg.journal_path);
  EXPECT_GT(st.journal->bytes, 0u);
  EXPECT_FALSE(st.journal->truncated);
  EXPECT_EQ(summary(c)["journal"]["path"], cfg.journal_path);
  c.finish_journal();
  std::filesystem::remove(cfg.journal_path);
}

TEST(KvEventClient, WhatTheEngineBufferedBeforeAttachIsReplayed) {
  Publisher p("tcp://127.0.0.1:*", "tcp://127.0.0.1:*");
  for (std::uint64_t h = 1; h <= 3; ++h) p.publish(store({h}));  // nobody listens yet
  ASSERT_TRUE(p.wait_published(3));
  KvEventClient c(config_for(p));
  ASSERT_TRUE(until(c, [&] { return c.totals().batches == 3; }));
  const KvRankStats t = c.totals();
  EXPECT_EQ(t.replayed, 3);
  EXPECT_EQ(t.gaps, 0);
  EXPECT_EQ(t.lost, 0);
  EXPECT_EQ(c.model().totals().live, 3);
}

TEST(KvEventClient, DroppedBatchesAreRecoveredByReplay) {
  Publisher p("tcp://127.0.0.1:*", "tcp://127.0.0.1:*");
  KvEventClient c(config_for(p));
  ASSERT_TRUE(attached(c, p));
  p.publish(store({1}));
  p.publish(store({2}, 1));
  p.publish(store({3}, 2), /*send=*/false);
  p.publish(store({4}, 3), /*send=*/false);
  p.publish(store({5}, 4));
  ASSERT_TRUE(until(c, [&] { return c.totals().batches == 5 && !c.ranks()[0].replaying; }));
  const KvRankStats t = c.totals();
  EXPECT_EQ(t.gaps, 1);
  EXPECT_EQ(t.replayed, 2);
  EXPECT_EQ(t.lost, 0);
  EXPECT_EQ(t.duplicates, 0);
  EXPECT_EQ(c.model().totals().live, 5);
  EXPECT_EQ(c.model().totals().unknown_parents, 0);  // applied in sequence order
}

// vLLM >= 0.26 and SGLang >= 0.5.22 answer a replay with the topic too: ["", topic, seq, payload]
// and the end marker ["", "", 0xFF x 8, ""]. History before attach and a dropped pair are
// recovered from it exactly as from the older three-frame answers.
TEST(KvEventClient, ReplayAnswersWithTheTopicAreUnderstood) {
  Publisher p("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", "kv-events");
  p.replay_with_topic();
  for (std::uint64_t h = 1; h <= 3; ++h) p.publish(store({h}));  // nobody listens yet
  ASSERT_TRUE(p.wait_published(3));
  KvAttachConfig cfg = config_for(p);
  cfg.topic = "kv-events";
  KvEventClient c(cfg);
  ASSERT_TRUE(until(c, [&] { return c.totals().batches == 3 && !c.ranks()[0].replaying; }));
  ASSERT_TRUE(until(c, [&] { return p.subscriptions() > 0; }));
  p.publish(store({4}, 3));
  p.publish(store({5}, 4), /*send=*/false);
  p.publish(store({6}, 5), /*send=*/false);
  p.publish(store({7}, 6));
  ASSERT_TRUE(until(c, [&] { return c.totals().batches == 7 && !c.ranks()[0].replaying; }));
  const KvRankStats t = c.totals();
  EXPECT_EQ(t.replay_frames, 4);
  EXPECT_EQ(t.replayed, 5);
  EXPECT_EQ(t.gaps, 1);
  EXPECT_EQ(t.lost, 0);
  EXPECT_EQ(t.bad_frames, 0);
  EXPECT_EQ(t.replay_timeouts, 0);
  EXPECT_EQ(c.model().totals().live, 7);
  EXPECT_EQ(c.model().totals().unknown_parents, 0);
  EXPECT_EQ(summary(c)["replay_frames"], 4);
}

TEST(KvEventClient, TheOlderThreeFrameReplayIsNamedToo) {
  Publisher p("tcp://127.0.0.1:*", "tcp://127.0.0.1:*");
  p.publish(store({1}));
  ASSERT_TRUE(p.wait_published(1));
  KvEventClient c(config_for(p));
  ASSERT_TRUE(until(c, [&] { return c.totals().batches == 1 && !c.ranks()[0].replaying; }));
  EXPECT_EQ(c.totals().replay_frames, 3);
  EXPECT_EQ(c.totals().lost, 0);
}

// Without a replay socket, what was published before the first batch seen is lost, and said so:
// sequences start at 0, so the first seq seen is how many went by.
TEST(KvEventClient, BatchesBeforeAttachWithoutAReplayAreCountedLost) {
  Publisher p("tcp://127.0.0.1:*", "");
  for (std::uint64_t h = 1; h <= 3; ++h) p.publish(store({h}));  // nobody listens yet
  ASSERT_TRUE(p.wait_published(3));
  KvEventClient c(config_for(p));
  ASSERT_TRUE(attached(c, p));
  p.publish(store({4}));
  ASSERT_TRUE(until(c, [&] { return c.totals().batches == 1; }));
  const KvRankStats t = c.totals();
  EXPECT_EQ(t.lost, 3);
  EXPECT_EQ(t.lost_before_attach, 3);
  EXPECT_EQ(t.lost_replay_expired + t.lost_mid_stream, 0);
  EXPECT_NE(status_line(c).find("lost 3 (3 before attach, never replayed)"), std::string::npos)
      << status_line(c);
  EXPECT_EQ(summary(c)["lost_by_cause"]["before_attach"], 3);
}

// The replay answered, but its buffer no longer held the oldest batches: counted lost as such.
TEST(KvEventClient, HistoryTheReplayBufferDroppedIsCountedLost) {
  Publisher p("tcp://127.0.0.1:*", "tcp://127.0.0.1:*");
  for (std::uint64_t h = 1; h <= 4; ++h) p.publish(store({h}));
  p.forget_below(3);  // the engine keeps its last batch only: seq 3
  ASSERT_TRUE(p.wait_published(4));
  KvEventClient c(config_for(p));
  ASSERT_TRUE(until(c, [&] { return c.totals().batches == 1 && !c.ranks()[0].replaying; }));
  const KvRankStats t = c.totals();
  EXPECT_EQ(t.replayed, 1);
  EXPECT_EQ(t.lost, 3);
  EXPECT_EQ(t.lost_replay_expired, 3);
}

// Issue #46: batches recovered by replay (the history before attach, a gap mid-stream) land in
// sequence order, so stores and removals of the same blocks on both sides of the attach point and
// of the gap leave the state of a subscriber that lost nothing. Batch i stores block i + 1 and,
// from batch 3 on, removes block i - 2: 3 blocks live at the end, whatever came by replay.
TEST(KvEventClient, ReplayedBatchesLandInSequenceOrder) {
  Publisher p("tcp://127.0.0.1:*", "tcp://127.0.0.1:*");
  const auto batch = [](std::uint64_t i) {
    std::vector<std::string> events = {stored_array({i + 1}, std::nullopt, 16)};
    if (i >= 3) events.push_back(removed_array({i - 2}));
    return batch_array(1.0, events);
  };
  for (std::uint64_t i = 0; i < 30; ++i) p.publish(batch(i));  // nobody listens yet
  ASSERT_TRUE(p.wait_published(30));
  KvEventClient c(config_for(p));
  ASSERT_TRUE(attached(c, p));
  for (std::uint64_t i = 30; i < 100; ++i) p.publish(batch(i), /*send=*/i != 60 && i != 61);
  ASSERT_TRUE(until(c, [&] { return c.totals().batches == 100 && !c.ranks()[0].replaying; }));
  const KvRankStats t = c.totals();
  EXPECT_EQ(t.lost, 0);
  EXPECT_EQ(t.replayed, 32);
  EXPECT_EQ(c.model().totals().live, 3);
  EXPECT_EQ(c.model().totals().unknown_removals, 0);
  EXPECT_EQ(c.model().totals().blocks_removed, 97);
  // Step by step, the recording (what the UI's timeline and scrubber show) is the engine's state
  // after each batch in sequence order: block i + 1 stored, block i - 2 removed, so
  // min(i + 1, 3) live after batch i; a replayed batch applied at its arrival instead would show
  // a removal before its store (one fewer) and a resurrected block (one more) around 30 and 60.
  const Timeline tl = c.model().build_timeline("order");
  ASSERT_EQ(tl.num_steps(), 100);
  for (int step = 0; step < 100; ++step) {
    std::int64_t cached = 0;
    for (const BlockState& b : tl.state_at(step).blocks) cached += b.cached ? 1 : 0;
    EXPECT_EQ(cached, std::min(step + 1, 3)) << "after batch " << step;
  }
}

TEST(KvEventClient, BatchesPublishedBetweenTheHistoryAndTheSubscriptionAreFetched) {
  // The engine answers the history request (nothing yet), then publishes batches the subscriber
  // misses on the wire (its subscription was still on its way): the first live batch it sees is
  // seq 2, and 0 and 1 come by a second history request, not counted lost.
  Publisher p("tcp://127.0.0.1:*", "tcp://127.0.0.1:*");
  KvEventClient c(config_for(p));
  ASSERT_TRUE(attached(c, p));
  p.publish(store({1}), false);
  p.publish(store({2}, 1), false);
  p.publish(store({3}, 2));
  ASSERT_TRUE(until(c, [&] { return c.totals().batches == 3 && !c.ranks()[0].replaying; }));
  const KvRankStats t = c.totals();
  EXPECT_EQ(t.replayed, 2);
  EXPECT_EQ(t.lost, 0);
  EXPECT_EQ(t.replay_requests, 2);
  EXPECT_EQ(c.model().totals().unknown_parents, 0);
}

TEST(KvEventClient, LiveBatchesNewerThanTheHistoryAnswerAreFetchedToo) {
  // The history answer (0, 1) is made before 2 and 3 exist; 2 is missed on the wire, 3 arrives.
  // However the answer and 3 interleave at the client, 2 is fetched and nothing is lost.
  Publisher p("tcp://127.0.0.1:*", "tcp://127.0.0.1:*");
  p.hold_replay();
  p.publish(store({1}));
  p.publish(store({2}, 1));
  ASSERT_TRUE(p.wait_published(2));  // before anyone subscribed: history only
  KvEventClient c(config_for(p));
  ASSERT_TRUE(until(c, [&] { return p.subscriptions() > 0 && p.replay_requests() > 0; }));
  p.answer_held();
  p.publish(store({3}, 2), false);
  p.publish(store({4}, 3));
  ASSERT_TRUE(until(c, [&] { return c.totals().batches == 4 && !c.ranks()[0].replaying; }));
  const KvRankStats t = c.totals();
  EXPECT_EQ(t.replayed, 3);
  EXPECT_EQ(t.lost, 0);
  EXPECT_EQ(t.gaps, 1);
  EXPECT_EQ(c.model().totals().live, 4);
  EXPECT_EQ(c.model().totals().unknown_parents, 0);
}

TEST(KvEventClient, WhatTheReplayNoLongerHasIsCountedLost) {
  Publisher p("tcp://127.0.0.1:*", "tcp://127.0.0.1:*");
  KvEventClient c(config_for(p));
  ASSERT_TRUE(attached(c, p));
  p.publish(store({1}));
  p.publish(store({2}), false);
  p.publish(store({3}), false);
  p.forget_below(2);  // the engine's buffer moved on: seq 1 is gone for good
  p.publish(store({4}));
  ASSERT_TRUE(until(c, [&] { return c.totals().batches == 3 && !c.ranks()[0].replaying; }));
  const KvRankStats t = c.totals();
  EXPECT_EQ(t.gaps, 1);
  EXPECT_EQ(t.lost, 1);
  EXPECT_EQ(t.lost_replay_expired, 1);
  EXPECT_EQ(t.replayed, 1);
  EXPECT_EQ(c.model().totals().live, 3);
}

TEST(KvEventClient, AReplaySocketThatNeverAnswersIsGivenUp) {
  Publisher p("tcp://127.0.0.1:*", "tcp://127.0.0.1:*");
  p.mute_replay();
  KvAttachConfig cfg = config_for(p);
  cfg.replay_timeout_ms = 200;
  KvEventClient c(cfg);
  ASSERT_TRUE(until(c, [&] { return c.totals().replay_timeouts == 1 && p.subscriptions() > 0; }));
  p.publish(store({1}));
  p.publish(store({2}), false);
  p.publish(store({3}));
  const Clock::time_point start = Clock::now();
  ASSERT_TRUE(until(c, [&] { return c.totals().batches == 2 && !c.ranks()[0].replaying; }));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  const KvRankStats t = c.totals();
  EXPECT_EQ(t.gaps, 1);
  EXPECT_EQ(t.lost, 1);
  EXPECT_EQ(t.lost_mid_stream, 1);
  EXPECT_EQ(t.replay_timeouts, 2);
  EXPECT_EQ(c.model().totals().live, 2);
}

TEST(KvEventClient, ARestartIsDetectedAndTheOldBlocksDropped) {
  Publisher p("tcp://127.0.0.1:*", "tcp://127.0.0.1:*");
  KvEventClient c(config_for(p));
  ASSERT_TRUE(attached(c, p));
  for (std::uint64_t h = 1; h <= 3; ++h) p.publish(store({h}));
  ASSERT_TRUE(until(c, [&] { return c.totals().batches == 3; }));
  p.restart();
  p.publish(store({10}));
  p.publish(store({11}, 10));
  ASSERT_TRUE(until(c, [&] { return c.totals().batches == 5; }));
  const KvRankStats t = c.totals();
  EXPECT_EQ(t.restarts, 1);
  EXPECT_EQ(t.gaps, 0);
  EXPECT_EQ(t.lost, 0);
  EXPECT_EQ(c.model().totals().live, 2);
  EXPECT_EQ(c.model().totals().blocks_cleared, 3);
  EXPECT_EQ(c.ranks()[0].last_seq, 1u);
}

TEST(KvEventClient, AnEngineRestartedOnNewSocketsIsCaughtUpByReplay) {
  auto p = std::make_unique<Publisher>("tcp://127.0.0.1:*", "tcp://127.0.0.1:*");
  const std::string pub_at = p->endpoint(), replay_at = p->replay_endpoint();
  KvEventClient c(config_for(*p));
  ASSERT_TRUE(attached(c, *p));
  for (std::uint64_t h = 1; h <= 3; ++h) p->publish(store({h}));
  ASSERT_TRUE(until(c, [&] { return c.totals().batches == 3; }));
  p.reset();  // the engine process exits
  // A new process binds the same ports (the old listener closes in ZeroMQ's own thread: retry).
  const Clock::time_point end = Clock::now() + std::chrono::seconds(10);
  while (!p) {
    try {
      p = std::make_unique<Publisher>(pub_at, replay_at);
    } catch (const zmq::error_t&) {
      ASSERT_LT(Clock::now(), end) << "could not bind " << pub_at << " again";
      c.poll(10);
    }
  }
  p->publish(store({20}));  // probably before the subscriber is back: replay brings them
  p->publish(store({21}, 20));
  ASSERT_TRUE(until(c, [&] { return p->subscriptions() > 0; }));
  p->publish(store({22}, 21));
  ASSERT_TRUE(until(c, [&] { return c.totals().batches == 6 && !c.ranks()[0].replaying; }));
  const KvRankStats t = c.totals();
  EXPECT_EQ(t.restarts, 1);
  EXPECT_EQ(t.lost, 0);
  EXPECT_EQ(c.model().totals().live, 3);
  EXPECT_EQ(c.model().totals().unknown_parents, 0);
}

TEST(KvEventClient, TwoDataParallelRanksStayApart) {
  // Rank r publishes at port + r and replays at replay port + r: find two free ports in a row.
  std::unique_ptr<Publisher> r0, r1;
  for (int attempt = 0; attempt < 50 && !r1; ++attempt) {
    r0 = std::make_unique<Publisher>("tcp://127.0.0.1:*", "tcp://127.0.0.1:*");
    try {
      r1 = std::make_unique<Publisher>("tcp://127.0.0.1:" + std::to_string(r0->port() + 1),
                                       "tcp://127.0.0.1:" + std::to_string(r0->replay_port() + 1));
    } catch (const zmq::error_t&) {
      r0.reset();
    }
  }
  ASSERT_TRUE(r1) << "no two free ports in a row";
  KvEventClient c(config_for(*r0, 2));
  ASSERT_EQ(c.ranks()[1].endpoint, r1->endpoint());
  ASSERT_TRUE(until(c, [&] {
    return r0->subscriptions() > 0 && r1->subscriptions() > 0 && !c.totals().replaying;
  }));
  // The same hashes on both ranks: two caches, two sequences each from 0.
  r0->publish(batch_array(1, {stored_array({1, 2}, std::nullopt, 16)}, 0));
  r1->publish(batch_array(1, {stored_array({1, 2, 3}, std::nullopt, 16)}, 1));
  r0->publish(batch_array(2, {removed_array({1})}, 0));
  ASSERT_TRUE(until(c, [&] { return c.totals().batches == 3; }));
  const auto& by_rank = c.model().by_rank();
  EXPECT_EQ(by_rank.at(0).live, 1);
  EXPECT_EQ(by_rank.at(1).live, 3);
  const KvRankStats t = c.totals();
  EXPECT_EQ(t.gaps, 0);
  EXPECT_EQ(t.restarts, 0);
  EXPECT_EQ(t.rank_mismatches, 0);
  EXPECT_EQ(c.ranks()[0].batches, 2);
  EXPECT_EQ(c.ranks()[1].batches, 1);
  const nlohmann::json s = summary(c);
  EXPECT_EQ(s["live_blocks_by_rank"], (nlohmann::json{{"0", 1}, {"1", 3}}));
  EXPECT_EQ(s["live_blocks"], 4);
}

TEST(KvEventClient, MalformedFramesAndPayloadsAreCountedAndSkipped) {
  Publisher p("tcp://127.0.0.1:*", "");
  KvEventClient c(config_for(p));
  ASSERT_TRUE(attached(c, p));
  p.raw({"", be64(0)});                      // two frames
  p.raw({"", "1234", "payload"});            // a 4-byte sequence number
  p.raw({"", be64(0), "x", "extra frame"});  // four frames
  p.publish("\xc1 not msgpack");             // seq 0: counted as a batch, not decoded
  p.publish(store({1}));                     // seq 1
  ASSERT_TRUE(until(c, [&] { return c.totals().batches == 2; }));
  const KvRankStats t = c.totals();
  EXPECT_EQ(t.bad_frames, 3);
  EXPECT_EQ(t.decode_errors, 1);
  EXPECT_EQ(t.gaps, 0);
  EXPECT_EQ(t.last_decode_error, "not msgpack (bad type byte at byte 0)");
  EXPECT_EQ(c.model().totals().live, 1);
  EXPECT_EQ(c.model().totals().undecodable, 1);
}

TEST(KvEventClient, NoPublisherGivesAStatusNotAHang) {
  std::string pub_at, replay_at;
  {
    Publisher gone("tcp://127.0.0.1:*", "tcp://127.0.0.1:*");  // two ports nobody will use
    pub_at = gone.endpoint();
    replay_at = gone.replay_endpoint();
  }
  KvAttachConfig cfg;
  cfg.endpoint = pub_at;
  cfg.replay_endpoint = replay_at;
  cfg.replay_timeout_ms = 300;
  const Clock::time_point start = Clock::now();
  KvEventClient c(cfg);
  c.poll(500);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  ASSERT_TRUE(until(
      c, [&] { return c.totals().replay_timeouts >= 1; }, 5.0));
  EXPECT_EQ(c.totals().batches, 0);
  EXPECT_EQ(c.ranks()[0].connection, KvConnection::kDisconnected);
  EXPECT_NE(status_line(c).find("not connected (no publisher listening?)"), std::string::npos)
      << status_line(c);
}

// Something that is not a ZeroMQ publisher answers at the port (an HTTP server, say): the
// status says so instead of "connected (engine idle?)". A plain TCP server here answers every
// connection with an HTTP error and closes it.
TEST(KvEventClient, AServerThatIsNotZeroMqIsNamed) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(listener, 8), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::atomic<bool> stop{false};
  std::thread server([&] {
    while (!stop) {
      pollfd pfd{listener, POLLIN, 0};
      if (poll(&pfd, 1, 50) <= 0) continue;
      const int conn = accept(listener, nullptr, nullptr);
      if (conn < 0) continue;
      const char reply[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
      (void)!write(conn, reply, sizeof reply - 1);
      close(conn);
    }
  });
  KvAttachConfig cfg;
  cfg.endpoint = "tcp://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  KvEventClient c(cfg);
  const bool named = until(
      c, [&] { return c.ranks()[0].connection == KvConnection::kNotZeroMq; }, 8.0);
  stop = true;
  server.join();
  close(listener);
  ASSERT_TRUE(named) << kv_connection_name(c.ranks()[0].connection);
  EXPECT_NE(status_line(c).find("not ZeroMQ"), std::string::npos) << status_line(c);
  EXPECT_EQ(c.totals().batches, 0);
}

TEST(KvEventClient, ATopicMismatchIsCountedAndNamed) {
  Publisher p("tcp://127.0.0.1:*", "", "kv-events");
  KvAttachConfig cfg = config_for(p);
  cfg.topic = "other";
  KvEventClient c(cfg);
  ASSERT_TRUE(attached(c, p));
  p.publish(store({1}));
  ASSERT_TRUE(until(c, [&] { return c.totals().other_topics == 1; }));
  EXPECT_EQ(c.totals().batches, 0);
  EXPECT_NE(status_line(c).find("on topic \"kv-events\", not the subscribed topic \"other\""),
            std::string::npos)
      << status_line(c);
}

TEST(KvEventClient, TheBatchLimitStopsAtExactlyN) {
  Publisher p("tcp://127.0.0.1:*", "");
  KvEventClient c(config_for(p));
  c.set_batch_limit(3);
  ASSERT_TRUE(attached(c, p));
  for (std::uint64_t h = 1; h <= 5; ++h) p.publish(store({h}));
  ASSERT_TRUE(until(c, [&] { return c.batch_limit_reached(); }));
  c.poll(50);
  EXPECT_EQ(c.totals().batches, 3);
  EXPECT_EQ(c.model().totals().live, 3);
}

TEST(KvEventClient, RankEndpointsFollowTheEnginesNumbering) {
  EXPECT_EQ(kv_rank_endpoint("tcp://10.1.2.3:5557", 0), "tcp://10.1.2.3:5557");
  EXPECT_EQ(kv_rank_endpoint("tcp://10.1.2.3:5557", 3), "tcp://10.1.2.3:5560");
  EXPECT_EQ(kv_rank_endpoint("tcp://[::1]:5557", 1), "tcp://[::1]:5558");
  EXPECT_EQ(kv_rank_endpoint("ipc:///tmp/kv", 2), "ipc:///tmp/kv_dp2");
  EXPECT_EQ(kv_rank_endpoint("inproc://kv", 1), "inproc://kv_dp1");
}

TEST(KvEventClient, EndpointsASubscriberCannotUseAreOneLineErrors) {
  auto error_of = [](const std::string& ep, int dp) -> std::string {
    try {
      check_kv_endpoint(ep, dp, "--replay");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of("tcp://*:5557", 1),
            "--replay: expected the engine's host to connect to (* is the address the engine "
            "binds; try tcp://127.0.0.1:5557), got 'tcp://*:5557'");
  EXPECT_EQ(error_of("tcp://host:0", 1),
            "--replay: expected tcp://HOST:PORT with PORT in [1, 65535], got 'tcp://host:0'");
  EXPECT_EQ(error_of("tcp://host:99999", 1),
            "--replay: expected tcp://HOST:PORT with PORT in [1, 65535], got 'tcp://host:99999'");
  EXPECT_EQ(error_of("tcp://host", 1),
            "--replay: expected tcp://HOST:PORT with PORT in [1, 65535], got 'tcp://host'");
  EXPECT_EQ(error_of("tcp://host:65535", 2),
            "--replay: expected a port that leaves room for 2 ranks (port + rank <= 65535), got "
            "'tcp://host:65535'");
  EXPECT_EQ(error_of("http://host:80", 1),
            "--replay: expected tcp://HOST:PORT or ipc://PATH, got 'http://host:80'");
  EXPECT_EQ(error_of("ipc://", 1),
            "--replay: expected tcp://HOST:PORT or ipc://PATH, got 'ipc://'");
  EXPECT_EQ(error_of("ipc:///tmp/kv", 4), "");
  EXPECT_EQ(error_of("tcp://[::1]:5557", 4), "");
  KvAttachConfig cfg;
  cfg.endpoint = "tcp://127.0.0.1:5557";
  cfg.dp_ranks = 0;
  EXPECT_THROW(KvEventClient{cfg}, Error);
  // Binding, a wildcard host is what one listens on.
  EXPECT_NO_THROW(check_kv_endpoint("tcp://*:5557", 2, "ENDPOINT", /*bind=*/true));
  EXPECT_NO_THROW(check_kv_endpoint("tcp://0.0.0.0:5557", 1, "ENDPOINT", /*bind=*/true));
  EXPECT_THROW(check_kv_endpoint("tcp://*:65535", 2, "ENDPOINT", /*bind=*/true), Error);
}

// Bind mode: an engine whose endpoint names kvscope's host connects its publisher to us.
TEST(KvEventClient, BindModeReceivesFromAnEngineThatConnects) {
  const std::string at = "ipc://" + testing::TempDir() + "kvscope-bind-test-" +
                         std::to_string(reinterpret_cast<std::uintptr_t>(&at));
  KvAttachConfig cfg;
  cfg.endpoint = at;
  cfg.bind = true;
  KvEventClient c(cfg);
  c.poll(10);
  EXPECT_EQ(c.ranks()[0].connection, KvConnection::kListening);
  EXPECT_NE(status_line(c).find("listening (no engine connected yet)"), std::string::npos)
      << status_line(c);
  Publisher p(at, "", "", /*connect=*/true);
  ASSERT_TRUE(until(c, [&] { return p.subscriptions() > 0; }));
  p.publish(store({1}));
  p.publish(store({2}, 1));
  ASSERT_TRUE(until(c, [&] { return c.totals().batches == 2; }));
  EXPECT_EQ(c.model().totals().live, 2);
  ASSERT_TRUE(until(c, [&] { return c.ranks()[0].connection == KvConnection::kConnected; }));
  EXPECT_EQ(c.ranks()[0].peers, 1);
  EXPECT_EQ(summary(c)["ranks"][0]["connection"], "connected");
}

TEST(KvEventClient, BindingAnAddressInUseIsAClearError) {
  Publisher p("tcp://127.0.0.1:*", "");  // holds a port
  KvAttachConfig cfg;
  cfg.endpoint = p.endpoint();
  cfg.bind = true;
  try {
    KvEventClient c(cfg);
    FAIL() << "bound " << p.endpoint() << " twice";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(p.endpoint()), std::string::npos) << what;
    EXPECT_NE(what.find("cannot bind: Address already in use"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace kvscope

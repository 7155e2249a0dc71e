// KvEventClient against an in-test publisher thread that speaks the engines' exact framing: a
// publisher socket sending [topic, seq 8B big-endian, payload] and a ROUTER replay socket that
// answers [identity, "", start_seq] with ["", seq, payload]... then ["", 0xFF x 8, ""]. Every wait
// is a poll with a deadline; nothing sleeps to synchronise.
#include "engine/trace/kv_event_client.h"

#include <gtest/gtest.h>
#include <zmq.h>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/common/error.h"
#include "tests/trace/kv_event_payloads.h"

namespace kvscope {
namespace {

using Clock = std::chrono::steady_clock;
using test::batch_array;
using test::removed_array;
using test::stored_array;

std::string be64(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) s[static_cast<std::size_t>(i)] = static_cast<char>(v);
  return s;
}

// One engine rank: an XPUB publisher (an XPUB looks like a PUB to subscribers, and lets the test
// see the subscription arrive) and a ROUTER replay socket, run by a thread of its own. The test
// thread queues commands; the publisher thread owns the sockets.
class Publisher {
 public:
  // Binds both sockets here, on the caller's thread, so a bind failure throws to the caller.
  // Endpoints such as "tcp://127.0.0.1:*" pick a free port; replay "" = no replay socket.
  Publisher(const std::string& pub_at, const std::string& replay_at, std::string topic = "")
      : topic_(std::move(topic)) {
    pub_ = zmq::socket_t(ctx_, zmq::socket_type::xpub);
    pub_.set(zmq::sockopt::linger, 0);
    pub_.set(zmq::sockopt::sndhwm, 100000);
    pub_.bind(pub_at);
    endpoint_ = pub_.get(zmq::sockopt::last_endpoint);
    if (!replay_at.empty()) {
      router_ = zmq::socket_t(ctx_, zmq::socket_type::router);
      router_.set(zmq::sockopt::linger, 0);
      router_.bind(replay_at);
      replay_endpoint_ = router_.get(zmq::sockopt::last_endpoint);
    }
    thread_ = std::thread([this] { run(); });
  }
  ~Publisher() {
    stop_ = true;
    thread_.join();
  }
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }
  int port() const { return std::stoi(endpoint_.substr(endpoint_.rfind(':') + 1)); }
  int replay_port() const {
    return std::stoi(replay_endpoint_.substr(replay_endpoint_.rfind(':') + 1));
  }
  int subscriptions() const { return subscriptions_; }
  int replay_requests() const { return replay_requests_; }

  // Numbers and buffers a batch; send = false drops it on the wire (the replay still has it).
  void publish(std::string payload, bool send = true) {
    post([this, payload = std::move(payload), send] {
      const std::uint64_t seq = seq_++;
      buffer_.emplace_back(seq, payload);
      if (send) send_frames({topic_, be64(seq), payload});
      ++published_;
    });
  }
  // Waits until the publisher thread has published `n` batches in all (a poll with a deadline).
  bool wait_published(int n) const {
    const Clock::time_point end = Clock::now() + std::chrono::seconds(10);
    while (published_ < n) {
      if (Clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }
  // A new engine process on the same sockets: sequence from 0, empty replay buffer.
  void restart() {
    post([this] {
      seq_ = 0;
      buffer_.clear();
    });
  }
  // Forgets buffered batches below `seq` (the engines' replay buffer holds the last N only).
  void forget_below(std::uint64_t seq) {
    post([this, seq] {
      while (!buffer_.empty() && buffer_.front().first < seq) buffer_.pop_front();
    });
  }
  // Any frames at all, for malformed-message tests.
  void raw(std::vector<std::string> frames) {
    post([this, frames = std::move(frames)] { send_frames(frames); });
  }
  // Replay requests are read and never answered (from now on: no command queue in between).
  void mute_replay() { muted_ = true; }
  // Replay requests wait until answer_held() (queued like publish: answered in that order).
  void hold_replay() { held_ = true; }
  void answer_held() {
    post([this] {
      held_ = false;
      for (auto& req : waiting_) answer(req);
      waiting_.clear();
    });
  }

 private:
  void post(std::function<void()> f) {
    std::lock_guard<std::mutex> lock(mu_);
    todo_.push_back(std::move(f));
  }
  void send_frames(const std::vector<std::string>& frames) {
    for (std::size_t i = 0; i < frames.size(); ++i) {
      pub_.send(zmq::buffer(frames[i]),
                i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
  // [identity, "", start_seq] -> ["", seq, payload] per buffered batch from start_seq on, then
  // ["", 0xFF x 8, ""] (the ROUTER prefixes the identity).
  void answer(const std::vector<std::string>& req) {
    if (req.size() != 3 || req[2].size() != 8) return;
    std::uint64_t start = 0;
    for (char ch : req[2]) start = start << 8 | static_cast<unsigned char>(ch);
    const std::string& id = req[0];
    for (const auto& [seq, payload] : buffer_) {
      if (seq < start) continue;
      router_.send(zmq::buffer(id), zmq::send_flags::sndmore);
      router_.send(zmq::message_t(), zmq::send_flags::sndmore);
      router_.send(zmq::buffer(be64(seq)), zmq::send_flags::sndmore);
      router_.send(zmq::buffer(payload), zmq::send_flags::none);
    }
    router_.send(zmq::buffer(id), zmq::send_flags::sndmore);
    router_.send(zmq::message_t(), zmq::send_flags::sndmore);
    router_.send(zmq::buffer(std::string(8, '\xff')), zmq::send_flags::sndmore);
    router_.send(zmq::message_t(), zmq::send_flags::none);
  }
  void serve_replay() {
    std::vector<zmq::message_t> frames;
    while (zmq::recv_multipart(router_, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
      std::vector<std::string> req;
      for (const zmq::message_t& f : frames) req.push_back(f.to_string());
      frames.clear();
      ++replay_requests_;
      if (muted_) continue;
      if (held_)
        waiting_.push_back(std::move(req));
      else
        answer(req);
    }
  }
  void run() {
    while (!stop_) {
      zmq_pollitem_t items[2] = {{pub_.handle(), 0, ZMQ_POLLIN, 0},
                                 {router_ ? router_.handle() : nullptr, 0, ZMQ_POLLIN, 0}};
      zmq_poll(items, router_ ? 2 : 1, 2);
      zmq::message_t m;
      while (pub_.recv(m, zmq::recv_flags::dontwait)) {
        if (m.size() > 0 && static_cast<const char*>(m.data())[0] == 1) ++subscriptions_;
      }
      if (router_) serve_replay();
      std::deque<std::function<void()>> todo;
      {
        std::lock_guard<std::mutex> lock(mu_);
        todo.swap(todo_);
      }
      for (auto& f : todo) f();
    }
  }

  zmq::context_t ctx_{1};
  zmq::socket_t pub_, router_;
  std::string topic_, endpoint_, replay_endpoint_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> subscriptions_{0}, replay_requests_{0}, published_{0};
  std::mutex mu_;
  std::deque<std::function<void()>> todo_;
  // Publisher thread only.
  std::uint64_t seq_ = 0;
  std::deque<std::pair<std::uint64_t, std::string>> buffer_;
  std::vector<std::vector<std::string>> waiting_;  // held replay requests
  std::atomic<bool> muted_{false}, held_{false};
};

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
  EXPECT_NE(c.status_line().find("batches 3"), std::string::npos) << c.status_line();
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
  const nlohmann::json s = c.summary_json();
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
  EXPECT_NE(c.status_line().find("not connected (no publisher listening?)"), std::string::npos)
      << c.status_line();
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
  EXPECT_NE(c.status_line().find("on topic \"kv-events\", not --topic \"other\""),
            std::string::npos)
      << c.status_line();
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
}

}  // namespace
}  // namespace kvscope

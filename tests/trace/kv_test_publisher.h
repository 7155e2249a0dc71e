// An in-test engine rank for the KV-event tests: a publisher socket sending the engines' exact
// framing [topic, seq (8 bytes big-endian), msgpack payload] and a ROUTER replay socket answering
// [identity, "", start_seq] with ["", seq, payload]... then ["", 0xFF x 8, ""] (vLLM <= 0.25,
// SGLang <= 0.5.21), or, after replay_with_topic(), ["", topic, seq, payload]... then ["", "",
// 0xFF x 8, ""] (vLLM >= 0.26, SGLang >= 0.5.22), run by a thread of its own. Shared by the
// client tests and the UI's attach tests.
#pragma once

#include <zmq.h>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kvscope::test {

inline std::string be64(std::uint64_t v) {
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
  // `connect`: the publisher connects to `pub_at` instead (an engine whose endpoint names its
  // subscriber's host), so the subscriber binds.
  Publisher(const std::string& pub_at, const std::string& replay_at, std::string topic = "",
            bool connect = false)
      : topic_(std::move(topic)) {
    pub_ = zmq::socket_t(ctx_, zmq::socket_type::xpub);
    pub_.set(zmq::sockopt::linger, 0);
    pub_.set(zmq::sockopt::sndhwm, 100000);
    if (connect) {
      pub_.connect(pub_at);
      endpoint_ = pub_at;
    } else {
      pub_.bind(pub_at);
      endpoint_ = pub_.get(zmq::sockopt::last_endpoint);
    }
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
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (published_ < n) {
      if (std::chrono::steady_clock::now() > end) return false;
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
  // Replay answers carry the topic from now on: the framing of vLLM >= 0.26, SGLang >= 0.5.22.
  void replay_with_topic() { with_topic_ = true; }
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
      if (with_topic_) router_.send(zmq::buffer(topic_), zmq::send_flags::sndmore);
      router_.send(zmq::buffer(be64(seq)), zmq::send_flags::sndmore);
      router_.send(zmq::buffer(payload), zmq::send_flags::none);
    }
    router_.send(zmq::buffer(id), zmq::send_flags::sndmore);
    router_.send(zmq::message_t(), zmq::send_flags::sndmore);
    if (with_topic_) router_.send(zmq::message_t(), zmq::send_flags::sndmore);
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
  std::atomic<bool> muted_{false}, held_{false}, with_topic_{false};
};

}  // namespace kvscope::test

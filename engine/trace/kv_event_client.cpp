// KvEventClient: ZeroMQ sockets per DP rank, sequence tracking, replay, restarts.
#include "engine/trace/kv_event_client.h"

#include <zmq.h>

#include <zmq.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <string_view>
#include <utility>

#include "engine/common/error.h"
#include "engine/trace/kv_journal.h"

namespace kvscope {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kEndSeq = ~std::uint64_t{0};  // the replay's end marker: 0xFF x 8
constexpr std::size_t kMaxFrames = 8;                 // more in one message: malformed
constexpr int kDrainPerSocket = 4096;  // messages handled per socket per pass (stay responsive)
constexpr int kHighWaterMark = 100'000;
constexpr int kHandshakeMs = 3000;  // a peer that does not greet in ZeroMQ by then is not one  //
                                    // the engines' own PUB default: a burst is not dropped

std::uint64_t read_be64(const void* p) {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | b[i];
  return v;
}

void write_be64(std::uint64_t v, unsigned char* out) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<unsigned char>(v & 0xff);
    v >>= 8;
  }
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Splits tcp://HOST:PORT at the last colon (IPv6 hosts come bracketed: tcp://[::1]:5557).
bool split_tcp(const std::string& ep, std::string& host, long& port) {
  const std::string rest = ep.substr(6);
  const std::size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= rest.size()) return false;
  host = rest.substr(0, colon);
  const std::string digits = rest.substr(colon + 1);
  if (digits.size() > 5 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  port = std::stol(digits);
  return true;
}

bool starts_with(const std::string& s, std::string_view prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// One message, every frame, without blocking. false: nothing waiting. A message of more than
// kMaxFrames frames is read to its end and returned truncated with `overflow` set.
bool recv_message(zmq::socket_t& s, std::vector<zmq::message_t>& frames, bool& overflow) {
  frames.clear();
  overflow = false;
  while (true) {
    zmq::message_t m;
    const zmq::recv_result_t got =
        s.recv(m, frames.empty() && !overflow ? zmq::recv_flags::dontwait : zmq::recv_flags::none);
    if (!got) return false;  // EAGAIN on the first frame (later frames are already here)
    const bool more = m.more();
    if (frames.size() < kMaxFrames)
      frames.push_back(std::move(m));
    else
      overflow = true;
    if (!more) return true;
  }
}

std::string_view view(const zmq::message_t& m) {
  return {static_cast<const char*>(m.data()), m.size()};
}

// Adds one rank's counters into the totals: sums, except the framing, the lag and `replaying`
// (the largest) and the last errors (the latest non-empty).
void add_rank_stats(KvRankStats& t, const KvRankStats& r) {
  t.batches += r.batches;
  t.gaps += r.gaps;
  t.replayed += r.replayed;
  t.lost += r.lost;
  t.lost_before_attach += r.lost_before_attach;
  t.lost_replay_expired += r.lost_replay_expired;
  t.lost_mid_stream += r.lost_mid_stream;
  t.replay_frames = std::max(t.replay_frames, r.replay_frames);
  t.decode_errors += r.decode_errors;
  t.restarts += r.restarts;
  t.bad_frames += r.bad_frames;
  t.other_topics += r.other_topics;
  t.duplicates += r.duplicates;
  t.rank_mismatches += r.rank_mismatches;
  t.replay_requests += r.replay_requests;
  t.replay_timeouts += r.replay_timeouts;
  t.replaying = t.replaying || r.replaying;
  t.lag_s = std::max(t.lag_s, r.lag_s);
  if (!r.last_decode_error.empty()) t.last_decode_error = r.last_decode_error;
  if (!r.last_other_topic.empty()) t.last_other_topic = r.last_other_topic;
}

}  // namespace

std::string kv_rank_endpoint(const std::string& base, int rank) {
  if (rank == 0) return base;
  if (starts_with(base, "tcp://")) {
    std::string host;
    long port = 0;
    if (split_tcp(base, host, port)) return "tcp://" + host + ":" + std::to_string(port + rank);
    return base;
  }
  return base + "_dp" + std::to_string(rank);
}

void check_kv_endpoint(const std::string& endpoint, int dp_ranks, const std::string& flag,
                       bool bind) {
  const std::string shown = "'" + endpoint + "'";
  if (starts_with(endpoint, "tcp://")) {
    std::string host;
    long port = 0;
    if (!split_tcp(endpoint, host, port) || port < 1 || port > 65535)
      fail_expected(flag, "tcp://HOST:PORT with PORT in [1, 65535]", shown);
    if (!bind && (host == "*" || host == "0.0.0.0" || host == "[::]")) {
      fail_expected(
          flag,
          "the engine's host to connect to (" + host +
              " is the address the engine binds; try tcp://127.0.0.1:" + std::to_string(port) + ")",
          shown);
    }
    if (port + dp_ranks - 1 > 65535) {
      fail_expected(flag,
                    "a port that leaves room for " + std::to_string(dp_ranks) +
                        " ranks (port + rank <= 65535)",
                    shown);
    }
    return;
  }
  if ((starts_with(endpoint, "ipc://") && endpoint.size() > 6) ||
      (starts_with(endpoint, "inproc://") && endpoint.size() > 9))
    return;
  fail_expected(flag, "tcp://HOST:PORT or ipc://PATH", shown);
}

// With N ranks the publishers take ports P..P+N-1 and the replay sockets R..R+N-1: on one host
// the two ranges must not overlap (the engine itself could not bind them; rank 1's publisher at
// 5558 is rank 0's replay socket with the usual 5557 / 5558 and two ranks).
void check_kv_ports_apart(const KvAttachConfig& cfg, const std::string& flag) {
  std::string pub_host, replay_host;
  long pub = 0, replay = 0;
  if (!starts_with(cfg.endpoint, "tcp://") || !starts_with(cfg.replay_endpoint, "tcp://") ||
      !split_tcp(cfg.endpoint, pub_host, pub) ||
      !split_tcp(cfg.replay_endpoint, replay_host, replay))
    return;
  const long n = cfg.dp_ranks;
  // One machine under two names counts as one (the usual loopback spellings).
  auto canonical = [](const std::string& h) {
    return h == "localhost" || h == "[::1]" ? std::string("127.0.0.1") : h;
  };
  if (canonical(pub_host) == canonical(replay_host) && pub < replay + n && replay < pub + n) {
    fail_expected(flag,
                  "a port outside the publishers' " + std::to_string(pub) + ".." +
                      std::to_string(pub + n - 1) + " (each of the " + std::to_string(n) +
                      " ranks takes port + rank for both sockets)",
                  "'" + cfg.replay_endpoint + "'");
  }
}

struct KvEventClient::Impl {
  struct Rank {
    KvRankStats stats;
    zmq::socket_t sub, dealer, monitor;
    bool has_monitor = false;
    bool not_zeromq = false;        // a handshake failed and none succeeded since
    bool started = false;           // the sequence position is known (a batch applied, ...)
    int catch_ups = 0;              // history requests since attach / restart (at most 2)
    bool catch_up_gave_up = false;  // one went unanswered: the replay socket is not there
    std::uint64_t next = 0;         // next expected seq, when started
    // The replay in flight.
    bool catch_up = false;
    Clock::time_point replay_deadline;
    std::deque<std::pair<std::uint64_t, std::string>> pending;  // live batches meanwhile
    std::size_t pending_bytes = 0;
  };

  KvAttachConfig cfg;
  zmq::context_t ctx{1};
  std::vector<Rank> ranks;
  std::vector<KvRankStats> stats_view;  // refreshed by ranks()
  KvEventModel model;
  std::unique_ptr<KvJournalWriter> journal;
  KvEventBatch batch;  // reused: decoding allocates less
  std::string decode_error;
  std::int64_t total_batches = 0;
  std::int64_t batch_limit = 0;

  explicit Impl(KvAttachConfig c) : cfg(std::move(c)), model(cfg.model) {
    model.set_clear_scope(cfg.clear_scope);
  }

  bool limit_reached() const { return batch_limit > 0 && total_batches >= batch_limit; }
  std::int64_t max_frame_bytes() const {
    return static_cast<std::int64_t>(cfg.decode.max_payload_bytes) + 4096;
  }

  void open_dealer(Rank& r) {
    r.dealer = zmq::socket_t(ctx, zmq::socket_type::dealer);
    r.dealer.set(zmq::sockopt::linger, 0);  // a request nobody took is dropped at close
    r.dealer.set(zmq::sockopt::rcvhwm, kHighWaterMark);  // a replay streams up to 10,000 batches
    r.dealer.set(zmq::sockopt::maxmsgsize, max_frame_bytes());
    r.dealer.connect(r.stats.replay_endpoint);
  }

  void open(int index) {
    Rank& r = ranks[static_cast<std::size_t>(index)];
    r.stats.rank = index;
    r.stats.endpoint = kv_rank_endpoint(cfg.endpoint, index);
    r.sub = zmq::socket_t(ctx, zmq::socket_type::sub);
    r.sub.set(zmq::sockopt::linger, 0);
    r.sub.set(zmq::sockopt::rcvhwm, kHighWaterMark);
    // A frame larger than any payload we would decode is refused by ZeroMQ before it is buffered
    // (the peer is disconnected), so a hostile peer cannot fill memory with huge frames.
    r.sub.set(zmq::sockopt::maxmsgsize, max_frame_bytes());
    // Every topic is received and compared exactly here: ZeroMQ's filter is a prefix match, and
    // counting the other topics tells a user whose --topic is wrong why nothing arrives.
    r.sub.set(zmq::sockopt::subscribe, "");
    if (!starts_with(r.stats.endpoint, "inproc://")) {
      // Connection state for the status line: connected, or nothing listening at that address
      // (bind mode: how many engines connected to us).
      const std::string mon = "inproc://kvscope-attach-monitor-" +
                              std::to_string(reinterpret_cast<std::uintptr_t>(this)) + "-" +
                              std::to_string(index);
      // The handshake events tell a ZeroMQ publisher from any other server on that port (a TCP
      // connection alone does not); a peer that never greets fails after kHandshakeMs.
      const int events =
          cfg.bind ? ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED
                   : ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED |
                         ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                         ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
      r.sub.set(zmq::sockopt::handshake_ivl, kHandshakeMs);
      if (zmq_socket_monitor(r.sub.handle(), mon.c_str(), events) == 0) {
        r.monitor = zmq::socket_t(ctx, zmq::socket_type::pair);
        r.monitor.set(zmq::sockopt::linger, 0);
        r.monitor.connect(mon);
        r.has_monitor = true;
        r.stats.connection = cfg.bind ? KvConnection::kListening : KvConnection::kDisconnected;
      }
    }
    if (cfg.bind) {
      try {
        r.sub.bind(r.stats.endpoint);
      } catch (const zmq::error_t& e) {
        throw Error(r.stats.endpoint, std::string("cannot bind: ") + e.what() +
                                          " (another process listening there?)");
      }
    } else {
      r.sub.connect(r.stats.endpoint);
    }
    if (!cfg.replay_endpoint.empty()) {
      r.stats.replay_endpoint = kv_rank_endpoint(cfg.replay_endpoint, index);
      open_dealer(r);
      start_replay(r, 0, /*catch_up=*/true);  // what the engine buffered before we came
    }
  }

  // ---- sequence tracking -------------------------------------------------------------------

  enum class Loss { kBeforeAttach, kReplayExpired, kMidStream };
  static void add_lost(Rank& r, std::uint64_t n, Loss cause) {
    if (n == 0) return;
    const auto count = static_cast<std::int64_t>(n);
    r.stats.lost += count;
    if (cause == Loss::kBeforeAttach) r.stats.lost_before_attach += count;
    if (cause == Loss::kReplayExpired) r.stats.lost_replay_expired += count;
    if (cause == Loss::kMidStream) r.stats.lost_mid_stream += count;
  }

  void apply(Rank& r, std::uint64_t seq, std::string_view payload, bool replayed) {
    if (limit_reached()) return;
    const int rank = r.stats.rank;
    if (journal) journal->batch(rank, static_cast<std::int64_t>(seq), replayed, payload);
    if (decode_kv_event_batch(payload, batch, decode_error, cfg.decode)) {
      if (batch.dp_rank && *batch.dp_rank != rank) ++r.stats.rank_mismatches;
      model.apply(rank, batch, static_cast<std::int64_t>(seq));
      if (!replayed) {
        r.stats.last_ts = batch.ts;
        r.stats.lag_s = wall_seconds() - batch.ts;
      }
    } else {
      ++r.stats.decode_errors;
      r.stats.last_decode_error = decode_error;
      model.apply_undecodable(rank);
    }
    r.started = true;
    r.next = seq + 1;
    r.stats.last_seq = seq;
    ++r.stats.batches;
    ++total_batches;
    if (replayed) ++r.stats.replayed;
  }

  void start_replay(Rank& r, std::uint64_t from, bool catch_up) {
    r.stats.replaying = true;
    r.catch_up = catch_up;
    if (catch_up) ++r.catch_ups;
    r.replay_deadline = Clock::now() + std::chrono::milliseconds(cfg.replay_timeout_ms);
    ++r.stats.replay_requests;
    unsigned char seq[8];
    write_be64(from, seq);
    // Queued even before the ROUTER is there (ZeroMQ connects in the background); the deadline
    // covers a replay socket that never answers.
    bool sent = false;
    try {
      sent = r.dealer.send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait)
                 .has_value() &&
             r.dealer.send(zmq::buffer(seq, 8), zmq::send_flags::dontwait).has_value();
    } catch (const zmq::error_t&) {
      sent = false;
    }
    if (!sent) finish_replay(r, /*given_up=*/true);
  }

  void finish_replay(Rank& r, bool given_up) {
    const bool was_catch_up = r.catch_up;
    r.stats.replaying = false;
    if (was_catch_up && given_up) r.catch_up_gave_up = true;
    r.catch_up = false;
    if (given_up) {
      ++r.stats.replay_timeouts;
      open_dealer(r);  // drops the request still queued and any late answer to it
    }
    if (!r.pending.empty()) {
      const std::uint64_t first = r.pending.front().first;
      if (!r.started) {
        // The replay delivered none of the batches before the first one seen.
        if (was_catch_up && !given_up && first > 0 && r.catch_ups < 2) {
          // Asked at attach, perhaps before the engine published them (kvscope started first,
          // or the subscription had not reached the engine yet): ask once more.
          start_replay(r, 0, /*catch_up=*/true);
          return;  // the batches keep waiting (or, if the request failed, are already applied)
        }
        r.started = true;
        r.next = first;
        add_lost(r, first, given_up ? Loss::kBeforeAttach : Loss::kReplayExpired);
      } else if (first > r.next) {
        if (was_catch_up) ++r.stats.gaps;  // found now (a gap replay's gap was counted before)
        if (was_catch_up && !given_up) {
          // The history was asked for at attach, perhaps before these were published (and
          // before the subscription reached the engine): ask once more from where it ended.
          start_replay(r, r.next, /*catch_up=*/false);
          return;  // the batches keep waiting (or, if the request failed, are already applied)
        }
        // This replay was asked after `first` was published and still did not have them.
        add_lost(r, first - r.next,
                 !given_up      ? Loss::kReplayExpired
                 : was_catch_up ? Loss::kBeforeAttach
                                : Loss::kMidStream);
        r.next = first;
      }
    }
    std::deque<std::pair<std::uint64_t, std::string>> waiting;
    waiting.swap(r.pending);
    r.pending_bytes = 0;
    while (!waiting.empty()) {
      auto [seq, payload] = std::move(waiting.front());
      waiting.pop_front();
      on_live(r, seq, std::move(payload));
      if (r.stats.replaying) {  // a gap inside the waiting batches: they wait again, in order
        for (auto& w : waiting) {
          r.pending_bytes += w.second.size();
          r.pending.push_back(std::move(w));
        }
        return;
      }
    }
  }

  void on_live(Rank& r, std::uint64_t seq, std::string payload) {
    if (r.stats.replaying) {
      if (r.pending.size() < cfg.max_pending_batches &&
          r.pending_bytes + payload.size() <= cfg.max_pending_bytes) {
        r.pending_bytes += payload.size();
        r.pending.emplace_back(seq, std::move(payload));
        return;
      }
      finish_replay(r, /*given_up=*/true);  // waiting any longer would not stay bounded
      if (r.stats.replaying) {              // the waiting batches started another replay
        r.pending_bytes += payload.size();
        r.pending.emplace_back(seq, std::move(payload));
        return;
      }
    }
    const bool replay = !cfg.replay_endpoint.empty();
    if (!r.started) {
      // History before the first batch seen. A second request covers the batches published
      // after the first one was answered but before the subscription reached the engine.
      if (replay && seq > 0 && r.catch_ups < 2 && !r.catch_up_gave_up) {
        start_replay(r, 0, /*catch_up=*/true);
        if (r.stats.replaying) {
          r.pending_bytes += payload.size();
          r.pending.emplace_back(seq, std::move(payload));
          return;
        }
      }
      // Sequences start at 0: the batches before this one were published and never seen.
      add_lost(r, seq, Loss::kBeforeAttach);
      apply(r, seq, payload, /*replayed=*/false);
      return;
    }
    if (seq == r.next) {
      apply(r, seq, payload, false);
      return;
    }
    if (seq > r.next) {
      ++r.stats.gaps;
      if (replay) {
        start_replay(r, r.next, /*catch_up=*/false);
        if (r.stats.replaying) {
          r.pending_bytes += payload.size();
          r.pending.emplace_back(seq, std::move(payload));
          return;
        }
      }
      add_lost(r, seq - r.next, Loss::kMidStream);
      apply(r, seq, payload, false);
      return;
    }
    // The sequence went back: a new publisher process, which holds none of the old blocks.
    ++r.stats.restarts;
    if (journal) journal->restart(r.stats.rank);
    model.restart(r.stats.rank);
    r.started = false;
    r.catch_ups = 0;
    r.catch_up_gave_up = false;
    on_live(r, seq, std::move(payload));
  }

  void on_replay(Rank& r, std::uint64_t seq, std::string_view payload) {
    if (!r.stats.replaying) {
      ++r.stats.duplicates;  // nothing asked for it (cannot happen: a given-up dealer is new)
      return;
    }
    if (seq == kEndSeq) {
      finish_replay(r, /*given_up=*/false);
      return;
    }
    // Batches also waiting from the live socket are applied from there, in order.
    if (!r.pending.empty() && seq >= r.pending.front().first) return;
    if (!r.started) {
      // Catch-up: history starts at the oldest batch the engine still has; the ones before it
      // were dropped from its replay buffer.
      r.started = true;
      r.next = 0;
    }
    if (seq < r.next) {
      ++r.stats.duplicates;
      return;
    }
    if (seq > r.next) add_lost(r, seq - r.next, Loss::kReplayExpired);
    apply(r, seq, payload, /*replayed=*/true);
  }

  // ---- sockets ---------------------------------------------------------------------------

  void drain_sub(Rank& r) {
    std::vector<zmq::message_t> frames;
    bool overflow = false;
    for (int n = 0; n < kDrainPerSocket && !limit_reached(); ++n) {
      if (!recv_message(r.sub, frames, overflow)) return;
      if (overflow || frames.size() != 3 || frames[1].size() != 8) {
        ++r.stats.bad_frames;
        continue;
      }
      const std::string_view topic = view(frames[0]);
      if (!cfg.topic.empty() && topic != cfg.topic) {
        ++r.stats.other_topics;
        // Printed on the status line: control bytes from the network become '?'.
        std::string shown_topic(topic.substr(0, 80));
        for (char& ch : shown_topic)
          if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
        r.stats.last_other_topic = std::move(shown_topic);
        continue;
      }
      on_live(r, read_be64(frames[1].data()), std::string(view(frames[2])));
    }
  }

  void drain_dealer(Rank& r) {
    std::vector<zmq::message_t> frames;
    bool overflow = false;
    for (int n = 0; n < kDrainPerSocket && !limit_reached(); ++n) {
      if (!recv_message(r.dealer, frames, overflow)) return;
      // Two framings, told apart per answer: ["", seq, payload] (vLLM <= 0.25, SGLang <=
      // 0.5.21) and ["", topic, seq, payload] (vLLM >= 0.26, SGLang >= 0.5.22), whose end
      // marker has an empty topic.
      const std::size_t n_frames = frames.size();
      if (overflow || (n_frames != 3 && n_frames != 4) || frames[0].size() != 0 ||
          frames[n_frames - 2].size() != 8) {
        ++r.stats.bad_frames;
        continue;
      }
      r.stats.replay_frames = static_cast<int>(n_frames);
      const std::uint64_t seq = read_be64(frames[n_frames - 2].data());
      if (n_frames == 4 && seq != kEndSeq && !cfg.topic.empty() && view(frames[1]) != cfg.topic) {
        ++r.stats.other_topics;
        continue;
      }
      on_replay(r, seq, view(frames[n_frames - 1]));
    }
  }

  void drain_monitor(Rank& r) {
    std::vector<zmq::message_t> frames;
    bool overflow = false;
    while (recv_message(r.monitor, frames, overflow)) {
      if (frames.empty() || frames[0].size() < 2) continue;
      std::uint16_t event = 0;
      std::memcpy(&event, frames[0].data(), 2);  // native byte order, as libzmq writes it
      if (cfg.bind) {
        // Several engines may connect to one bound socket (one per process that publishes).
        if (event == ZMQ_EVENT_ACCEPTED) ++r.stats.peers;
        if (event == ZMQ_EVENT_DISCONNECTED && r.stats.peers > 0) --r.stats.peers;
        r.stats.connection =
            r.stats.peers > 0 ? KvConnection::kConnected : KvConnection::kListening;
        continue;
      }
      // A failed handshake sticks through the reconnects that follow it (each would show
      // "handshaking" again) until a handshake succeeds.
      if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) r.not_zeromq = false;
      if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ||
          event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
        r.not_zeromq = true;
      if (event == ZMQ_EVENT_CONNECTED) r.stats.connection = KvConnection::kHandshaking;
      if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) r.stats.connection = KvConnection::kConnected;
      if (event == ZMQ_EVENT_DISCONNECTED || event == ZMQ_EVENT_CONNECT_RETRIED)
        r.stats.connection = KvConnection::kDisconnected;
      if (r.not_zeromq) r.stats.connection = KvConnection::kNotZeroMq;
    }
  }

  void check_deadlines() {
    const Clock::time_point now = Clock::now();
    for (Rank& r : ranks)
      if (r.stats.replaying && now >= r.replay_deadline) finish_replay(r, /*given_up=*/true);
  }

  std::int64_t poll(int timeout_ms) {
    const std::int64_t before = total_batches;
    const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    std::vector<zmq_pollitem_t> items;
    while (!limit_reached()) {
      items.clear();
      Clock::time_point wake = deadline;
      for (Rank& r : ranks) {
        items.push_back({r.sub.handle(), 0, ZMQ_POLLIN, 0});
        if (r.dealer) items.push_back({r.dealer.handle(), 0, ZMQ_POLLIN, 0});
        if (r.has_monitor) items.push_back({r.monitor.handle(), 0, ZMQ_POLLIN, 0});
        if (r.stats.replaying) wake = std::min(wake, r.replay_deadline);
      }
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(wake - Clock::now());
      const int rc = zmq_poll(items.data(), static_cast<int>(items.size()),
                              std::max<long>(0, static_cast<long>(wait.count())));
      if (rc < 0) {
        if (zmq_errno() == EINTR) break;  // Ctrl-C: return so the caller can look at its flag
        throw Error("kvscope attach",
                    std::string("polling the sockets failed: ") + zmq_strerror(zmq_errno()));
      }
      try {
        for (Rank& r : ranks) {
          drain_sub(r);
          if (r.dealer) drain_dealer(r);
          if (r.has_monitor) drain_monitor(r);
        }
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) break;
        throw Error("kvscope attach", std::string("ZeroMQ: ") + e.what());
      }
      check_deadlines();
      if (Clock::now() >= deadline) break;
    }
    return total_batches - before;
  }
};

KvEventClient::KvEventClient(KvAttachConfig config) : impl_(std::make_unique<Impl>(config)) {
  if (impl_->cfg.dp_ranks < 1 || impl_->cfg.dp_ranks > 256)
    fail_expected("dp ranks", "an integer in [1, 256]", std::to_string(impl_->cfg.dp_ranks));
  check_kv_endpoint(impl_->cfg.endpoint, impl_->cfg.dp_ranks, "endpoint", impl_->cfg.bind);
  if (!impl_->cfg.replay_endpoint.empty()) {
    check_kv_endpoint(impl_->cfg.replay_endpoint, impl_->cfg.dp_ranks, "replay endpoint");
    check_kv_ports_apart(impl_->cfg, "replay endpoint");
  }
  if (!impl_->cfg.journal_path.empty()) {
    impl_->journal =
        std::make_unique<KvJournalWriter>(impl_->cfg.journal_path, impl_->cfg.max_journal_bytes);
  }
  impl_->ranks.resize(static_cast<std::size_t>(impl_->cfg.dp_ranks));
  try {
    for (int i = 0; i < impl_->cfg.dp_ranks; ++i) impl_->open(i);
  } catch (const zmq::error_t& e) {
    throw Error(impl_->cfg.endpoint, std::string("cannot connect: ") + e.what());
  }
}

KvEventClient::~KvEventClient() = default;

std::int64_t KvEventClient::poll(int timeout_ms) {
  return impl_->poll(timeout_ms);
}
void KvEventClient::set_batch_limit(std::int64_t n) {
  impl_->batch_limit = n;
}
bool KvEventClient::batch_limit_reached() const {
  return impl_->limit_reached();
}
const KvAttachConfig& KvEventClient::config() const {
  return impl_->cfg;
}
const KvEventModel& KvEventClient::model() const {
  return impl_->model;
}
void KvEventClient::finish_journal() {
  if (impl_->journal) impl_->journal->finish();
}

const std::vector<KvRankStats>& KvEventClient::ranks() const {
  impl_->stats_view.clear();
  for (const Impl::Rank& r : impl_->ranks) impl_->stats_view.push_back(r.stats);
  return impl_->stats_view;
}

KvRankStats KvEventClient::totals() const {
  KvRankStats t;
  t.rank = -1;
  t.endpoint = impl_->cfg.endpoint;
  t.replay_endpoint = impl_->cfg.replay_endpoint;
  for (const Impl::Rank& r : impl_->ranks) add_rank_stats(t, r.stats);
  return t;
}

KvAttachStatus KvEventClient::status() const {
  const KvAttachConfig& cfg = impl_->cfg;
  KvAttachStatus s;
  s.endpoint = cfg.endpoint;
  s.replay_endpoint = cfg.replay_endpoint;
  s.topic = cfg.topic;
  s.dp_ranks = cfg.dp_ranks;
  s.bind = cfg.bind;
  s.ranks = ranks();
  s.totals = totals();
  if (impl_->journal) {
    const KvJournalWriter& j = *impl_->journal;
    s.journal = KvJournalStatus{j.path(), j.bytes(), j.truncated()};
  }
  return s;
}

}  // namespace kvscope

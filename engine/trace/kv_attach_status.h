// KvAttachStatus: where an attach to a live KV-event stream stands, as plain data: per rank the
// connection state and the sequence counters (batches, gaps, replays, lost batches by cause, ...)
// and their totals. KvEventClient (kv_event_client.h) fills it; the words and the JSON made from
// it live outside the engine (present/attach_report.h), shared by `kvscope attach` and kvscope-ui.
// No ZeroMQ and no msgpack here: the types build without them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvscope {

enum class KvConnection : std::uint8_t {
  kUnknown,       // inproc, or not reported yet
  kConnected,     // the SUB socket has a ZeroMQ connection to the publisher (handshake done)
  kDisconnected,  // nothing accepted the connection (yet): no publisher at that address
  kListening,     // bind mode: bound, no engine connected (yet)
  kHandshaking,   // TCP / IPC connected, no ZeroMQ greeting back yet
  kNotZeroMq,     // something accepted the connection but failed the ZeroMQ handshake: not the
                  // engine's event port (an HTTP port, say)
};

// Per rank (publisher). Block counters are in KvEventModel::by_rank().
struct KvRankStats {
  int rank = 0;
  std::string endpoint, replay_endpoint;
  KvConnection connection = KvConnection::kUnknown;
  std::int64_t batches = 0;   // sequence numbers applied (live or replayed), decoded or not
  std::int64_t gaps = 0;      // jumps forward in the sequence
  std::int64_t replayed = 0;  // batches applied from the replay socket
  std::int64_t lost = 0;      // sequence numbers neither received nor replayed, of which:
  std::int64_t lost_before_attach = 0;   // published before the first batch seen; no replay
                                         // delivered them (none configured, or it never answered)
  std::int64_t lost_replay_expired = 0;  // asked for; the replay answered without them (its buffer
                                         // had dropped them)
  std::int64_t lost_mid_stream = 0;      // a gap in the live stream that no replay filled
  int replay_frames = 0;  // the replay answers' framing seen: 3 (vLLM <= 0.25, SGLang <= 0.5.21)
                          // or 4 (with the topic: vLLM >= 0.26, SGLang >= 0.5.22); 0 before one
  std::int64_t decode_errors = 0;    // payloads that did not decode (counted, skipped)
  std::int64_t restarts = 0;         // the sequence went backwards
  std::int64_t bad_frames = 0;       // messages not of the expected frames (counted, skipped)
  std::int64_t other_topics = 0;     // batches on a topic other than --topic (skipped)
  std::int64_t duplicates = 0;       // a seq already applied (skipped)
  std::int64_t rank_mismatches = 0;  // payloads whose data_parallel_rank is not this rank
  std::int64_t replay_requests = 0;
  std::int64_t replay_timeouts =
      0;          // replays given up (no end marker in time, or too much waiting)
  int peers = 0;  // bind mode: engines connected to this rank's socket now
  bool replaying = false;
  std::optional<std::uint64_t> last_seq;
  double last_ts = 0.0;  // the engine's timestamp of the last live batch
  double lag_s = 0.0;    // receive time - that timestamp (includes clock skew between hosts)
  std::string last_decode_error;
  std::string last_other_topic;  // control bytes replaced by '?', at most 80 bytes
};

// The stream journal (stream.kvj) while it is written.
struct KvJournalStatus {
  std::string path;
  std::uint64_t bytes = 0;  // written so far
  bool truncated = false;   // it reached its cap and stopped growing
};

// One attach at one moment: what was asked for, and each rank's state.
struct KvAttachStatus {
  std::string endpoint;         // rank 0's publisher, as configured
  std::string replay_endpoint;  // rank 0's replay socket; "" = none
  std::string topic;            // "" = every topic
  int dp_ranks = 1;
  bool bind = false;
  std::vector<KvRankStats> ranks;          // [rank]
  KvRankStats totals;                      // counters summed over ranks (rank = -1)
  std::optional<KvJournalStatus> journal;  // none without a journal
};

}  // namespace kvscope

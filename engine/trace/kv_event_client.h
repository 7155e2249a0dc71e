// KvEventClient: attaches to the KV-cache event stream of a running vLLM or SGLang engine over
// ZeroMQ, one publisher per data-parallel rank, and folds what arrives into a KvEventModel.
//
// Per rank r (endpoint port + r for tcp, NAME_dp<r> for ipc/inproc, as the engines number them):
//   - a SUB socket receives [topic, seq (8 bytes big-endian), msgpack payload]; seq counts from 0
//     per publisher process;
//   - a DEALER socket (when a replay endpoint is given) sends ["", start_seq] to the engine's
//     ROUTER, which answers ["", seq, payload] for each batch it still buffers from start_seq on,
//     then ["", 0xFF x 8, ""].
// Sequence tracking per rank: at attach (and after a restart) it asks for everything buffered
// ("catch-up"); a jump forward is a gap, filled by a replay from the first missing seq while live
// batches wait in a bounded queue; what the replay no longer has is counted lost; a seq going
// backwards is a restart (the engine's blocks are dropped, then catch-up). Every wait is a poll
// with a deadline: nothing blocks on a publisher that never appears.
// Part of kvscope_attach, the one library that links ZeroMQ (kvscope_engine does not). The state
// comes out as plain data (status(): kv_attach_status.h); no words or JSON here: the status line
// and the summary are present/attach_report.h's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/trace/kv_attach_status.h"
#include "engine/trace/kv_event_model.h"
#include "engine/trace/kv_event_stream.h"

namespace kvscope {

struct KvAttachConfig {
  std::string endpoint;         // rank 0's PUB address: tcp://HOST:PORT, ipc://PATH, inproc://NAME
  std::string replay_endpoint;  // rank 0's ROUTER address; "" = no replay (gaps are lost)
  std::string topic;            // "" = every topic; else only frames whose topic is exactly this
  int dp_ranks = 1;             // publishers: ranks 0 .. dp_ranks-1
  // false: connect to each rank's PUB (the engine binds: its endpoint has `*`, `::`, ipc://).
  // true: bind ENDPOINT (+ rank) here and let the engines connect to it (an engine given a
  // concrete host such as tcp://kvscope-host:5557 connects instead of binding).
  bool bind = false;
  int replay_timeout_ms = 3000;               // a replay with no end marker by then is given up
  std::size_t max_pending_batches = 100'000;  // live batches held while a replay runs
  std::size_t max_pending_bytes = std::size_t{256} << 20;
  KvDecodeLimits decode;
  KvModelLimits model;
  KvClearScope clear_scope = KvClearScope::kAuto;  // what AllBlocksCleared drops
  // "" = none; else every applied batch and restart is journaled there (kv_journal.h), for
  // `kvscope lookup` afterwards. It stops growing past max_journal_bytes (summary says so).
  std::string journal_path;
  std::uint64_t max_journal_bytes = std::uint64_t{1} << 30;
};

// The address of DP rank `rank` given rank 0's: tcp port + rank, otherwise "_dp<rank>" appended
// (the engines' own convention; rank 0 keeps the address as given).
std::string kv_rank_endpoint(const std::string& base, int rank);
// Throws kvscope::Error naming `flag` unless `endpoint` is one a subscriber can connect to (or,
// with `bind`, bind) for `dp_ranks` ranks: tcp://HOST:PORT (PORT + dp_ranks - 1 at most 65535;
// to connect, not a bind address like tcp://*:5557), ipc://PATH or inproc://NAME.
void check_kv_endpoint(const std::string& endpoint, int dp_ranks, const std::string& flag,
                       bool bind = false);

// Throws kvscope::Error naming `flag` when the publishers' ports (endpoint + 0..dp_ranks-1) and
// the replay sockets' ports overlap on one host (the engine could not bind them either).
void check_kv_ports_apart(const KvAttachConfig& config, const std::string& flag);

class KvEventClient {
 public:
  // Connects (ZeroMQ connects lazily: a missing publisher is not an error here; stats say so).
  // Throws kvscope::Error for an endpoint check_kv_endpoint refuses or ZeroMQ rejects.
  explicit KvEventClient(KvAttachConfig config);
  ~KvEventClient();
  KvEventClient(const KvEventClient&) = delete;
  KvEventClient& operator=(const KvEventClient&) = delete;

  // Handles whatever arrives within `timeout_ms` (returns early when interrupted by a signal or
  // when the batch limit is reached). Returns the batches applied during this call.
  std::int64_t poll(int timeout_ms);
  // Stop applying after `n` batches in all (0 = no limit); what is left stays unread.
  void set_batch_limit(std::int64_t n);
  bool batch_limit_reached() const;

  const KvAttachConfig& config() const;
  const KvEventModel& model() const;
  const std::vector<KvRankStats>& ranks() const;
  KvRankStats totals() const;  // counters summed over ranks (rank = -1)
  // The whole state as plain data: the configuration, every rank, the totals, the journal. The
  // status line and the summary JSON are made from it (and model()) by present/attach_report.h.
  KvAttachStatus status() const;
  // Closes the journal and renames it into place (a no-op without one). Throws kvscope::Error
  // naming the file when it cannot be written.
  void finish_journal();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvscope

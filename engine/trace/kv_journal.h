// The KV-event journal `kvscope attach` writes beside its recording (stream.kvj): every batch it
// applied, byte for byte as the engine sent it, with its rank and sequence number, and every
// publisher restart, in the order applied. Replaying it through the decoder into a KvEventModel
// rebuilds the attach's exact state, which is what `kvscope lookup` answers from (recording.kvr
// is a Timeline: it keeps neither hashes nor token ids).
//
// Layout: "KVSJRNL1", then records, little-endian:
//   u8 kind (1 batch, 2 restart) | u16 rank | i64 seq (-1 unknown) | u8 replayed |
//   u32 payload bytes | payload                       (restart: seq -1, replayed 0, 0 bytes)
// A journal is written under NAME.part and renamed when attach ends, so a file named .kvj is
// whole; a record cut short is refused with its byte offset.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

#include "engine/trace/kv_event_model.h"
#include "engine/trace/kv_event_stream.h"

namespace kvscope {

class KvJournalWriter {
 public:
  // Opens PATH.part; throws kvscope::Error naming it when it cannot. Stops writing (truncated())
  // once max_bytes would be passed.
  KvJournalWriter(std::string path, std::uint64_t max_bytes);
  ~KvJournalWriter();  // an unfinished journal's .part is removed
  KvJournalWriter(const KvJournalWriter&) = delete;
  KvJournalWriter& operator=(const KvJournalWriter&) = delete;

  void batch(int rank, std::int64_t seq, bool replayed, std::string_view payload);
  void restart(int rank);
  // Flushes and renames PATH.part to PATH; throws kvscope::Error naming PATH on failure.
  void finish();
  bool truncated() const { return truncated_; }
  std::uint64_t bytes() const { return bytes_; }
  const std::string& path() const { return path_; }

 private:
  void record(std::uint8_t kind, int rank, std::int64_t seq, bool replayed,
              std::string_view payload);

  std::string path_;
  std::uint64_t max_bytes_;
  std::uint64_t bytes_ = 0;
  bool truncated_ = false;
  bool finished_ = false;
  std::ofstream out_;
};

struct KvJournalStats {
  std::int64_t batches = 0;
  std::int64_t restarts = 0;
  std::int64_t decode_errors = 0;
};

// Applies the journal at `path` to `model` (decoding each payload as attach did). Throws
// kvscope::Error naming the file and byte offset for a file that is not a journal or is cut
// short.
KvJournalStats replay_kv_journal(const std::string& path, KvEventModel& model,
                                 const KvDecodeLimits& limits = {});

}  // namespace kvscope

// KvJournalWriter and replay_kv_journal: see kv_journal.h for the layout.
#include "engine/trace/kv_journal.h"

#include <cstdio>
#include <filesystem>
#include <vector>

#include "engine/common/error.h"

namespace kvscope {

namespace {
constexpr char kMagic[8] = {'K', 'V', 'S', 'J', 'R', 'N', 'L', '1'};
constexpr std::size_t kHeaderBytes = 1 + 2 + 8 + 1 + 4;
constexpr std::uint8_t kBatch = 1, kRestart = 2;

template <typename T>
void put(std::string& out, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff));
}

std::uint64_t get(const unsigned char* p, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}
}  // namespace

KvJournalWriter::KvJournalWriter(std::string path, std::uint64_t max_bytes)
    : path_(std::move(path)), max_bytes_(max_bytes) {
  out_.open(path_ + ".part", std::ios::binary | std::ios::trunc);
  if (!out_) throw Error(path_ + ".part", "cannot open for writing the KV-event journal");
  out_.write(kMagic, sizeof kMagic);
  bytes_ = sizeof kMagic;
}

KvJournalWriter::~KvJournalWriter() {
  if (finished_) return;
  out_.close();
  std::error_code ec;
  std::filesystem::remove(path_ + ".part", ec);
}

void KvJournalWriter::record(std::uint8_t kind, int rank, std::int64_t seq, bool replayed,
                             std::string_view payload) {
  if (truncated_ || finished_) return;
  const std::uint64_t n = kHeaderBytes + payload.size();
  if (bytes_ + n > max_bytes_ || payload.size() > UINT32_MAX) {
    truncated_ = true;
    return;
  }
  std::string head;
  put<std::uint8_t>(head, kind);
  put<std::uint16_t>(head, static_cast<std::uint16_t>(rank));
  put<std::int64_t>(head, seq);
  put<std::uint8_t>(head, replayed ? 1 : 0);
  put<std::uint32_t>(head, static_cast<std::uint32_t>(payload.size()));
  out_.write(head.data(), static_cast<std::streamsize>(head.size()));
  out_.write(payload.data(), static_cast<std::streamsize>(payload.size()));
  bytes_ += n;
}

void KvJournalWriter::batch(int rank, std::int64_t seq, bool replayed, std::string_view payload) {
  record(kBatch, rank, seq, replayed, payload);
}

void KvJournalWriter::restart(int rank) {
  record(kRestart, rank, -1, false, {});
}

void KvJournalWriter::finish() {
  if (finished_) return;
  out_.flush();
  out_.close();
  if (!out_) throw Error(path_ + ".part", "could not write the KV-event journal (disk full?)");
  std::error_code ec;
  std::filesystem::rename(path_ + ".part", path_, ec);
  if (ec) throw Error(path_, "cannot rename the KV-event journal into place: " + ec.message());
  finished_ = true;
}

KvJournalStats replay_kv_journal(const std::string& path, KvEventModel& model,
                                 const KvDecodeLimits& limits) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, "cannot open (expected a KV-event journal, stream.kvj)");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < sizeof kMagic || !std::equal(kMagic, kMagic + sizeof kMagic, bytes.begin())) {
    throw Error(path,
                "expected a KV-event journal (starting \"KVSJRNL1\", written by kvscope "
                "attach as stream.kvj), got another kind of file");
  }
  KvJournalStats stats;
  KvEventBatch batch;
  std::string error;
  std::size_t at = sizeof kMagic;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  while (at < bytes.size()) {
    if (bytes.size() - at < kHeaderBytes) {
      throw Error(path, "record at byte " + std::to_string(at) +
                            ": expected a 16-byte record header, got " +
                            std::to_string(bytes.size() - at) + " bytes (the file is cut short)");
    }
    const auto kind = static_cast<std::uint8_t>(p[at]);
    const int rank = static_cast<int>(get(p + at + 1, 2));
    const auto seq = static_cast<std::int64_t>(get(p + at + 3, 8));
    const std::uint64_t n = get(p + at + 12, 4);
    if (kind != kBatch && kind != kRestart) {
      throw Error(path, "record at byte " + std::to_string(at) +
                            ": expected kind 1 (batch) or 2 (restart), got " +
                            std::to_string(kind));
    }
    if (bytes.size() - at - kHeaderBytes < n) {
      throw Error(path, "record at byte " + std::to_string(at) + ": expected " + std::to_string(n) +
                            " payload bytes, got " +
                            std::to_string(bytes.size() - at - kHeaderBytes) +
                            " (the file is cut short)");
    }
    const std::string_view payload(bytes.data() + at + kHeaderBytes, n);
    at += kHeaderBytes + n;
    if (kind == kRestart) {
      model.restart(rank);
      ++stats.restarts;
      continue;
    }
    ++stats.batches;
    if (decode_kv_event_batch(payload, batch, error, limits)) {
      model.apply(rank, batch, seq);
    } else {
      ++stats.decode_errors;
      model.apply_undecodable(rank);
    }
  }
  return stats;
}

}  // namespace kvscope

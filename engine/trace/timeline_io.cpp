// Timeline recordings: a versioned little-endian binary file, written atomically, read back with
// byte-offset errors. Layout (docs/recording-format.md):
//   "KVSCOPER" | u32 version | i32 num_blocks | i32 block_size | str title | str allocator |
//   str kv_format | f64 kv_bytes_per_token | u8 random_weights | u64 num_steps | u64 num_events |
//   events [num_events] (u8 type, i32 step, request, block, logical, i64 a, b) |
//   step_end [num_steps] u64 | metrics [num_steps] (StepMetrics fields in declaration order) |
//   version 2 only: u32 num_sections | sections [num_sections] (u32 tag, u64 length, payload) |
//   u64 FNV-1a of every byte before it.   (str = u32 length + bytes)
// Version 1 files (no sections) still load. Section tag 1, the token text (at most one):
//   i32 bos_id (-1: none) | u32 num_prompts | prompts [num_prompts] (u32 n, i32 ids [n]) |
//   u32 num_pieces | pieces [num_pieces] (i32 id, ascending | str text | u8 has_after_bos |
//   str after_bos when 1). A reader skips sections whose tag it does not know, so a later optional
//   section needs no new version (saving again drops them).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "engine/common/atomic_write.h"
#include "engine/common/bit_cast.h"
#include "engine/common/error.h"
#include "engine/kv/event_payloads.h"
#include "engine/trace/timeline.h"

namespace kvscope {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'S', 'C', 'O', 'P', 'E', 'R'};
constexpr std::uint32_t kVersion = 2;            // written
constexpr std::uint32_t kFirstVersion = 1;       // the oldest read
constexpr std::uint32_t kTextSectionTag = 1;     // the token text
constexpr std::size_t kSectionHeaderBytes = 12;  // u32 tag + u64 length
constexpr std::uint8_t kMaxEventType =
    static_cast<std::uint8_t>(EventType::kBlockGrouped);  // the last

// Every StepMetrics field, in file order (the same list writes and reads).
template <typename M, typename F>
void visit_metrics(M& m, F&& f) {
  f(m.step), f(m.blocks_total), f(m.blocks_used), f(m.blocks_cached_free), f(m.slots_allocated);
  f(m.slots_filled), f(m.internal_frag_slots), f(m.reservation_waste_slots), f(m.largest_free_run);
  f(m.free_blocks), f(m.requests_waiting), f(m.requests_running), f(m.requests_swapped);
  f(m.requests_finished), f(m.requests_rejected), f(m.preemptions), f(m.tokens_recomputed);
  f(m.prefill_tokens), f(m.decode_tokens), f(m.prefix_hit_tokens), f(m.prompt_tokens);
  f(m.kv_bytes_used);
}

std::uint64_t fnv1a(const char* data, std::size_t n) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 1099511628211ull;
  }
  return h;
}

class Writer {
 public:
  template <typename T>
  void put(T v) {
    using U = std::make_unsigned_t<T>;
    auto u = static_cast<U>(v);
    for (std::size_t i = 0; i < sizeof(T); ++i)
      bytes.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
  }
  void put_f64(double v) { put(kvscope::bit_cast<std::uint64_t>(v)); }
  void put_str(const std::string& s) {
    put(static_cast<std::uint32_t>(s.size()));
    bytes.append(s);
  }
  std::string bytes;
};

class Reader {
 public:
  Reader(std::string path, std::vector<char> bytes)
      : path_(std::move(path)), bytes_(std::move(bytes)) {}
  std::size_t offset() const { return pos_; }
  std::size_t size() const { return bytes_.size(); }
  std::size_t left() const { return end_ - pos_; }  // before the end of the file or section
  const std::vector<char>& bytes() const { return bytes_; }
  // Reads stop at `length` bytes from here (a section's payload) until leave_section().
  void enter_section(std::size_t length, std::string name) {
    section_start_ = pos_;
    end_ = pos_ + length;
    section_ = std::move(name);
  }
  void leave_section() {
    if (pos_ != end_) {
      fail(pos_,
           "the " + section_ + " section to end at byte " + std::to_string(end_) + " (its length)",
           std::to_string(end_ - pos_) + " bytes more");
    }
    end_ = bytes_.size();
    section_.clear();
  }
  void skip(std::size_t n) { pos_ += std::min(n, left()); }

  [[noreturn]] void fail(std::size_t at, const std::string& expected,
                         const std::string& got) const {
    fail_expected(path_ + ": byte " + std::to_string(at), expected, got);
  }
  void need(std::size_t n, std::string_view what) const {
    if (end_ - pos_ >= n) return;
    if (!section_.empty()) {
      fail(pos_, std::to_string(n) + " more bytes (" + std::string(what) + ")",
           "the end of the " + section_ + " section after its " +
               std::to_string(end_ - section_start_) + " bytes (truncated section)");
    }
    fail(pos_, std::to_string(n) + " more bytes (" + std::string(what) + ")",
         "end of file after " + std::to_string(bytes_.size()) + " bytes (truncated recording)");
  }
  template <typename T>
  T get(std::string_view what) {
    need(sizeof(T), what);
    using U = std::make_unsigned_t<T>;
    U u = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      u |= static_cast<U>(static_cast<U>(static_cast<unsigned char>(bytes_[pos_ + i])) << (8 * i));
    }
    pos_ += sizeof(T);
    return static_cast<T>(u);
  }
  double get_f64(std::string_view what) {
    return kvscope::bit_cast<double>(get<std::uint64_t>(what));
  }
  std::string get_str(std::string_view what) {
    const std::size_t at = pos_;
    const auto n = get<std::uint32_t>(what);
    if (n > end_ - pos_) {
      fail(at,
           std::string(what) + " length within the " +
               (section_.empty()
                    ? "file"
                    : section_ + " section (" + std::to_string(end_ - pos_) + " bytes left)"),
           std::to_string(n));
    }
    std::string s(bytes_.data() + pos_, n);
    pos_ += n;
    return s;
  }

 private:
  std::string path_;
  std::vector<char> bytes_;
  std::size_t pos_ = 0;
  std::size_t end_ = bytes_.size();  // reads stop here: the file's end or the section's
  std::size_t section_start_ = 0;
  std::string section_;  // the section being read ("" outside one), for errors
};

// Every token id the text section needs a piece for: the prompts' and the sampled ones.
std::set<int> used_token_ids(const TokenText& text, std::span<const Event> events) {
  std::set<int> ids;
  for (const std::vector<int>& prompt : text.prompts())
    for (int id : prompt)
      if (id >= 0 && id <= kMaxRecordedTokenId) ids.insert(id);
  for (const Event& e : events) {
    if (e.type != EventType::kDecodeToken) continue;
    const std::int64_t token = event_as<ev::DecodeToken>(e).token;
    if (token >= 0 && token <= kMaxRecordedTokenId) ids.insert(static_cast<int>(token));
  }
  return ids;
}

// The token-text section's payload (tag 1).
std::string text_section(const TokenText& text, std::span<const Event> events) {
  Writer w;
  w.put(static_cast<std::int32_t>(text.bos_id()));
  w.put(static_cast<std::uint32_t>(text.prompts().size()));
  for (const std::vector<int>& prompt : text.prompts()) {
    w.put(static_cast<std::uint32_t>(prompt.size()));
    for (int id : prompt) w.put(static_cast<std::int32_t>(id));
  }
  // After BOS only where it differs (llama2.c's leading space); a BPE tokenizer ignores prev.
  Writer pieces;
  std::uint32_t num_pieces = 0;
  for (int id : used_token_ids(text, events)) {
    const std::optional<std::string> piece = text.decode(-1, id);
    if (!piece) continue;  // no text for it (outside the vocabulary): the UI shows the id
    const std::optional<std::string> after_bos =
        text.bos_id() >= 0 ? text.decode(text.bos_id(), id) : std::nullopt;
    const bool differs = after_bos && *after_bos != *piece;
    pieces.put(static_cast<std::int32_t>(id));
    pieces.put_str(*piece);
    pieces.put(static_cast<std::uint8_t>(differs ? 1 : 0));
    if (differs) pieces.put_str(*after_bos);
    ++num_pieces;
  }
  w.put(num_pieces);
  w.bytes += pieces.bytes;
  return std::move(w.bytes);
}

// Reads the token-text section's payload (the reader is inside it).
std::shared_ptr<const TokenText> read_text_section(Reader& r) {
  const std::size_t at_bos = r.offset();
  const auto bos = r.get<std::int32_t>("text.bos_id");
  if (bos < -1 || bos > kMaxRecordedTokenId) {
    r.fail(at_bos, "text.bos_id in [-1, " + std::to_string(kMaxRecordedTokenId) + "]",
           std::to_string(bos));
  }
  const std::size_t at_prompts = r.offset();
  const auto num_prompts = r.get<std::uint32_t>("text.num_prompts");
  if (num_prompts > r.left() / 4) {
    r.fail(at_prompts,
           "text.num_prompts of at most " + std::to_string(r.left() / 4) +
               " (4 bytes each in the section's bytes left)",
           std::to_string(num_prompts));
  }
  std::vector<std::vector<int>> prompts(num_prompts);
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    const std::string field = "text.prompts[" + std::to_string(p) + "]";
    const std::size_t at_n = r.offset();
    const auto n = r.get<std::uint32_t>(field + " length");
    if (n > r.left() / 4) {
      r.fail(at_n,
             field + " length of at most " + std::to_string(r.left() / 4) +
                 " tokens (4 bytes each in the section's bytes left)",
             std::to_string(n));
    }
    prompts[p].resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t at = r.offset();
      const auto id = r.get<std::int32_t>("text.prompts token");  // in the bytes checked above
      if (id < 0 || id > kMaxRecordedTokenId) {
        r.fail(at,
               field + "[" + std::to_string(i) + "]: a token id in [0, " +
                   std::to_string(kMaxRecordedTokenId) + "]",
               std::to_string(id));
      }
      prompts[p][i] = id;
    }
  }
  const std::size_t at_pieces = r.offset();
  const auto num_pieces = r.get<std::uint32_t>("text.num_pieces");
  constexpr std::size_t kMinPieceBytes = 9;  // i32 id + u32 text length + u8 flag
  if (num_pieces > r.left() / kMinPieceBytes) {
    r.fail(at_pieces,
           "text.num_pieces of at most " + std::to_string(r.left() / kMinPieceBytes) +
               " (9 bytes or more each in the section's bytes left)",
           std::to_string(num_pieces));
  }
  std::map<int, RecordedText::Piece> pieces;
  int prev_id = -1;
  for (std::uint32_t k = 0; k < num_pieces; ++k) {
    const std::string field = "text.pieces[" + std::to_string(k) + "]";
    const std::size_t at = r.offset();
    const auto id = r.get<std::int32_t>(field + ".id");
    if (id <= prev_id || id > kMaxRecordedTokenId) {
      r.fail(at,
             field + ".id in [" + std::to_string(prev_id + 1) + ", " +
                 std::to_string(kMaxRecordedTokenId) + "] (ids ascending)",
             std::to_string(id));
    }
    prev_id = id;
    RecordedText::Piece piece;
    piece.text = r.get_str(field + ".text");
    const std::size_t at_flag = r.offset();
    const auto has_after_bos = r.get<std::uint8_t>(field + ".has_after_bos");
    if (has_after_bos > 1)
      r.fail(at_flag, field + ".has_after_bos of 0 or 1", std::to_string(has_after_bos));
    if (has_after_bos == 1) piece.after_bos = r.get_str(field + ".after_bos");
    pieces.emplace(id, std::move(piece));
  }
  return std::make_shared<RecordedText>(bos, std::move(prompts), std::move(pieces));
}

}  // namespace

void Timeline::save(const std::string& path) const {
  const int steps = num_steps();  // a consistent prefix even while the writer appends
  std::vector<std::uint64_t> ends;
  std::span<const Event> evs;
  {
    std::shared_lock lock(mutex_);
    for (int i = 0; i < steps; ++i) ends.push_back(step_end_[static_cast<std::size_t>(i)]);
    evs = events_.span(0, steps == 0 ? 0 : ends.back());
  }
  std::span<const StepMetrics> ms = all_metrics().subspan(0, static_cast<std::size_t>(steps));
  Writer w;
  w.bytes.append(kMagic, 8);
  w.put(kVersion);
  w.put(header_.num_blocks);
  w.put(header_.block_size);
  w.put_str(header_.title);
  w.put_str(header_.allocator);
  w.put_str(header_.kv_format);
  w.put_f64(header_.kv_bytes_per_token);
  w.put(static_cast<std::uint8_t>(header_.random_weights ? 1 : 0));
  w.put(static_cast<std::uint64_t>(steps));
  w.put(static_cast<std::uint64_t>(evs.size()));
  for (const Event& e : evs) {
    w.put(static_cast<std::uint8_t>(e.type));
    w.put(e.step), w.put(e.request), w.put(e.block), w.put(e.logical), w.put(e.a), w.put(e.b);
  }
  for (std::uint64_t end : ends) w.put(end);
  for (StepMetrics m : ms) visit_metrics(m, [&](auto v) { w.put(v); });
  w.put(static_cast<std::uint32_t>(header_.text ? 1 : 0));  // sections
  if (header_.text) {
    const std::string payload = text_section(*header_.text, evs);
    w.put(kTextSectionTag);
    w.put(static_cast<std::uint64_t>(payload.size()));
    w.bytes += payload;
  }
  w.put(fnv1a(w.bytes.data(), w.bytes.size()));
  write_file_atomically(path, [&](std::ostream& out) {
    out.write(w.bytes.data(), static_cast<std::streamsize>(w.bytes.size()));
  });
}

namespace {

// The magic and the version; returns the version.
std::uint32_t read_magic_and_version(Reader& r) {
  r.need(8, "magic \"KVSCOPER\"");
  if (std::memcmp(r.bytes().data(), kMagic, 8) != 0) {
    r.fail(0, "the magic \"KVSCOPER\" (a kvscope recording)", "other bytes");
  }
  r.get<std::uint64_t>("magic");
  const std::size_t at_version = r.offset();
  const auto version = r.get<std::uint32_t>("version");
  if (version < kFirstVersion || version > kVersion) {
    r.fail(at_version,
           "version " + std::to_string(kFirstVersion) + " to " + std::to_string(kVersion) +
               " (this build reads up to " + std::to_string(kVersion) + ")",
           std::to_string(version));
  }
  return version;
}

// The header's fields from num_blocks to random_weights (no token text: that is a section).
TimelineHeader read_header_fields(Reader& r) {
  TimelineHeader h;
  const std::size_t at_blocks = r.offset();
  h.num_blocks = r.get<std::int32_t>("num_blocks");
  h.block_size = r.get<std::int32_t>("block_size");
  // The simulator's largest pool (cache.num_blocks); more would allocate gigabytes on a bad file.
  if (h.num_blocks <= 0 || h.num_blocks > 50'000'000)
    r.fail(at_blocks, "num_blocks in [1, 50000000]", std::to_string(h.num_blocks));
  if (h.block_size <= 0 || h.block_size > 32767) {
    r.fail(at_blocks + 4, "block_size in [1, 32767]", std::to_string(h.block_size));
  }
  h.title = r.get_str("title");
  h.allocator = r.get_str("allocator");
  h.kv_format = r.get_str("kv_format");
  h.kv_bytes_per_token = r.get_f64("kv_bytes_per_token");
  h.random_weights = r.get<std::uint8_t>("random_weights") != 0;
  return h;
}

constexpr std::size_t kEventBytes = 33;

// The range checks of one event read at byte `at` (field offsets: type 0, step 1, request 5,
// block 9, logical 13, a 17, b 25).
void check_event(Reader& r, const Event& e, std::size_t at, std::int32_t num_blocks) {
  if (e.block < -1 || e.block >= num_blocks) {
    r.fail(at + 9, "a block id in [-1, " + std::to_string(num_blocks) + ")",
           std::to_string(e.block));
  }
  if (e.request < -1) r.fail(at + 5, "a request id >= -1", std::to_string(e.request));
  // A block event's logical index is a slot in one request's block table, which never holds
  // more blocks than the pool (replay sizes the table by it: INT32_MAX would allocate 8 GB).
  const bool table_event = e.type == EventType::kBlockAllocated ||
                           e.type == EventType::kBlockFreed || e.type == EventType::kBlockShared ||
                           e.type == EventType::kBlockCopiedOnWrite ||
                           e.type == EventType::kBlockCached || e.type == EventType::kTierReloaded;
  // A token index (the UI sizes per-token arrays by it).
  if (e.type == EventType::kEvictedPosition && (e.logical < 0 || e.logical >= (1 << 24)))
    r.fail(at + 13, "a token index in [0, 16777216)", std::to_string(e.logical));
  if ((e.type == EventType::kTierHeld || e.type == EventType::kTierMoved) &&
      (e.logical < 0 || e.logical >= 64))
    r.fail(at + 13, "a tier index in [0, 64)", std::to_string(e.logical));
  if (e.type == EventType::kTierReloaded) {
    const std::int64_t tier = event_as<ev::TierReloaded>(e).tier;
    if (tier < 0 || tier >= 64) r.fail(at + 17, "a tier index in [0, 64)", std::to_string(tier));
  }
  if (e.type == EventType::kBlockGrouped) {
    const auto g = event_as<ev::BlockGrouped>(e);
    if (g.group < 0 || g.group > 127)
      r.fail(at + 13, "a layer group in [0, 127]", std::to_string(g.group));
    if (g.kind < 0 || g.kind > 2) r.fail(at + 17, "a group kind 0, 1 or 2", std::to_string(g.kind));
    if (g.window < 0 || g.window > (1 << 24))
      r.fail(at + 25, "a window in [0, 16777216]", std::to_string(g.window));
  }
  if (e.type == EventType::kTierMoved) {
    const std::int64_t to = event_as<ev::TierMoved>(e).to_tier;
    if (to < -1 || to >= 64) r.fail(at + 17, "a tier index in [-1, 64)", std::to_string(to));
  }
  if (table_event && (e.logical < -1 || e.logical >= num_blocks)) {
    r.fail(at + 13, "a block-table index in [-1, " + std::to_string(num_blocks) + ")",
           std::to_string(e.logical));
  }
}

// `num_events` events (their count was read at byte `at_events`), each range-checked.
std::vector<Event> read_events(Reader& r, std::size_t at_events, std::uint64_t num_events,
                               std::int32_t num_blocks) {
  if (num_events > (r.size() - r.offset()) / kEventBytes) {
    r.fail(at_events,
           "at most " + std::to_string((r.size() - r.offset()) / kEventBytes) +
               " events in the bytes left (truncated recording?)",
           std::to_string(num_events));
  }
  std::vector<Event> events(num_events);
  for (Event& e : events) {
    const std::size_t at = r.offset();
    const auto type = r.get<std::uint8_t>("event type");
    if (type > kMaxEventType)
      r.fail(at, "an event type in [0, " + std::to_string(kMaxEventType) + "]",
             std::to_string(type));
    e.type = static_cast<EventType>(type);
    e.step = r.get<std::int32_t>("event step");
    e.request = r.get<std::int32_t>("event request");
    e.block = r.get<std::int32_t>("event block");
    e.logical = r.get<std::int32_t>("event logical");
    e.a = r.get<std::int64_t>("event a");
    e.b = r.get<std::int64_t>("event b");
    check_event(r, e, at, num_blocks);
  }
  return events;
}

// `steps` step ends (their count was read at byte `at_steps`), ascending, the last at
// `num_events`.
std::vector<std::uint64_t> read_step_ends(Reader& r, std::size_t at_steps, std::uint64_t steps,
                                          std::uint64_t num_events) {
  const std::size_t metric_bytes = [] {
    StepMetrics m;
    std::size_t n = 0;
    visit_metrics(m, [&](auto v) { n += sizeof(v); });
    return n;
  }();
  if (steps > (r.size() - r.offset()) / (8 + metric_bytes)) {
    r.fail(at_steps,
           "at most " + std::to_string((r.size() - r.offset()) / (8 + metric_bytes)) +
               " steps in the bytes left (truncated recording?)",
           std::to_string(steps));
  }
  std::vector<std::uint64_t> ends(steps);
  std::uint64_t prev = 0;
  for (auto& end : ends) {
    const std::size_t at = r.offset();
    end = r.get<std::uint64_t>("step end offset");
    if (end < prev || end > num_events) {
      r.fail(at, "a step end in [" + std::to_string(prev) + ", " + std::to_string(num_events) + "]",
             std::to_string(end));
    }
    prev = end;
  }
  if (prev != num_events)
    r.fail(r.offset() - 8, "the last step to end at event " + std::to_string(num_events),
           std::to_string(prev));
  return ends;
}

std::vector<StepMetrics> read_metrics(Reader& r, std::uint64_t steps) {
  std::vector<StepMetrics> metrics(steps);
  for (StepMetrics& m : metrics) {
    visit_metrics(
        m, [&](auto& v) { v = r.get<std::remove_reference_t<decltype(v)>>("step metrics"); });
  }
  return metrics;
}

// Version 2's sections: the token text goes into `h`, sections of unknown tags are skipped.
void read_sections(Reader& r, TimelineHeader& h) {
  const std::size_t at_count = r.offset();
  const auto num_sections = r.get<std::uint32_t>("num_sections");
  if (num_sections > r.left() / kSectionHeaderBytes) {
    r.fail(at_count,
           "num_sections of at most " + std::to_string(r.left() / kSectionHeaderBytes) +
               " (12 bytes or more each in the bytes left)",
           std::to_string(num_sections));
  }
  for (std::uint32_t k = 0; k < num_sections; ++k) {
    const std::string field = "sections[" + std::to_string(k) + "]";
    const std::size_t at = r.offset();
    const auto tag = r.get<std::uint32_t>(field + ".tag");
    const auto length = r.get<std::uint64_t>(field + ".length");
    // Every section ends before the 8-byte checksum.
    const std::size_t room = r.left() >= 8 ? r.left() - 8 : 0;
    if (length > room) {
      r.fail(at + 4,
             field + ".length within the " + std::to_string(room) +
                 " bytes before the checksum (truncated recording?)",
             std::to_string(length));
    }
    if (tag != kTextSectionTag) {
      r.skip(static_cast<std::size_t>(length));  // a later version's optional section
      continue;
    }
    if (h.text) r.fail(at, "at most one token-text section (tag 1)", "a second one");
    r.enter_section(static_cast<std::size_t>(length), "token-text (" + field + ")");
    h.text = read_text_section(r);
    r.leave_section();
  }
}

// The checksum of every byte before it, then the end of the file.
void read_checksum_and_end(Reader& r) {
  const std::size_t at_sum = r.offset();
  const auto sum = r.get<std::uint64_t>("checksum");
  if (sum != fnv1a(r.bytes().data(), at_sum))
    r.fail(at_sum, "the FNV-1a checksum of the bytes before it", "a mismatch (corrupt recording)");
  if (r.offset() != r.size())
    r.fail(r.offset(), "end of file", std::to_string(r.size() - r.offset()) + " trailing bytes");
}

}  // namespace

Timeline Timeline::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, "cannot open recording: " + std::string(std::strerror(errno)));
  Reader r(path, {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()});
  const std::uint32_t version = read_magic_and_version(r);
  TimelineHeader h = read_header_fields(r);
  const auto steps = r.get<std::uint64_t>("num_steps");
  const std::size_t at_events = r.offset();
  const auto num_events = r.get<std::uint64_t>("num_events");
  const std::size_t events_start = r.offset();
  const std::vector<Event> events = read_events(r, at_events, num_events, h.num_blocks);
  const std::vector<std::uint64_t> ends = read_step_ends(r, at_events - 8, steps, num_events);
  const std::vector<StepMetrics> metrics = read_metrics(r, steps);
  if (version >= 2) read_sections(r, h);
  read_checksum_and_end(r);

  Timeline t(std::move(h));
  std::size_t next = 0;
  for (std::size_t s = 0; s < steps; ++s) {
    for (; next < ends[s]; ++next) {
      if (events[next].step != static_cast<std::int32_t>(s)) {
        r.fail(events_start + next * kEventBytes + 1,
               "event " + std::to_string(next) + " to be stamped step " + std::to_string(s),
               std::to_string(events[next].step));
      }
      try {
        t.emit(events[next]);
      } catch (const Error& e) {
        throw Error(path, "event " + std::to_string(next) + ": " + e.what());
      }
    }
    t.end_step(metrics[s]);
  }
  return t;
}

}  // namespace kvscope

// KV-cache event payload decoding: a bounded msgpack parse, then a walk over the object tree that
// checks every type before reading it (msgpack-cxx's as<T>() would throw on a mismatch).
#include "engine/trace/kv_event_stream.h"

#include <msgpack.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <iterator>
#include <new>
#include <string>
#include <utility>

namespace kvscope {

namespace {

using msgpack::type::object_type;

// Thrown inside this file only; decode_kv_event_batch turns it into its error string.
struct DecodeFailure {
  std::string reason;
};

[[noreturn]] void fail(std::string reason) {
  throw DecodeFailure{std::move(reason)};
}

// The pre-pass: walks the payload without building anything and refuses it when the declared
// container sizes could not fit in its bytes, when it nests too deep, or when it is not exactly
// one msgpack value. Only then does msgpack::unpack allocate, at most ~48 bytes per payload byte.
class BudgetVisitor : public msgpack::null_visitor {
 public:
  BudgetVisitor(std::size_t bytes, std::size_t max_depth) : budget_(bytes), max_depth_(max_depth) {}
  bool start_array(std::uint32_t n) { return open(n, "an array"); }
  bool end_array() { return close(); }
  bool start_map(std::uint32_t n) {
    return open(static_cast<std::uint64_t>(n) * 2, "a map");  // a key and a value per pair
  }
  bool end_map() { return close(); }
  void parse_error(std::size_t /*parsed*/, std::size_t error_offset) {
    if (reason_.empty())
      reason_ = "not msgpack (bad type byte at byte " + std::to_string(error_offset) + ")";
  }
  void insufficient_bytes(std::size_t /*parsed*/, std::size_t /*error_offset*/) {
    if (reason_.empty()) reason_ = "truncated msgpack (the payload ends inside a value)";
  }
  const std::string& reason() const { return reason_; }

 private:
  bool open(std::uint64_t elements, const char* what) {
    if (++depth_ > max_depth_) {
      reason_ = "expected msgpack nested at most " + std::to_string(max_depth_) +
                " deep, got deeper nesting";
      return false;
    }
    if (elements > budget_) {
      reason_ = std::string("expected at most one element per payload byte, got ") + what +
                " declaring " + std::to_string(elements) + " elements in a payload of " +
                std::to_string(budget_total()) + " bytes";
      return false;
    }
    budget_ -= elements;
    spent_ += elements;
    return true;
  }
  bool close() {
    --depth_;
    return true;
  }
  std::size_t budget_total() const { return budget_ + spent_; }

  std::size_t budget_;
  std::size_t spent_ = 0;
  std::size_t max_depth_;
  std::size_t depth_ = 0;
  std::string reason_;
};

// str and bin objects point into the payload instead of being copied into the zone.
bool reference_all(object_type /*type*/, std::size_t /*size*/, void* /*user*/) {
  return true;
}

// "a float", "a string \"abc\"", "an array of 3", ...: what a wrong value was, for errors.
std::string shown(const msgpack::object& o) {
  switch (o.type) {
    case object_type::NIL:
      return "nil";
    case object_type::BOOLEAN:
      return o.via.boolean ? "true" : "false";
    case object_type::POSITIVE_INTEGER:
      return std::to_string(o.via.u64);
    case object_type::NEGATIVE_INTEGER:
      return std::to_string(o.via.i64);
    case object_type::FLOAT32:
    case object_type::FLOAT64:
      return "a float";
    case object_type::STR: {
      std::string s(o.via.str.ptr, std::min<std::size_t>(o.via.str.size, 40));
      for (char& c : s)
        if (static_cast<unsigned char>(c) < 0x20 || c == '"') c = '?';
      return "the string \"" + s + (o.via.str.size > 40 ? "...\"" : "\"");
    }
    case object_type::BIN:
      return std::to_string(o.via.bin.size) + " bytes";
    case object_type::ARRAY:
      return "an array of " + std::to_string(o.via.array.size);
    case object_type::MAP:
      return "a map of " + std::to_string(o.via.map.size);
    case object_type::EXT:
      return "a msgpack ext value";
  }
  return "an unknown msgpack value";
}

// Where a value sits ("events[3]: block_hashes[2]"), spelled out only when something is wrong:
// building the string for every value would cost more than decoding it.
struct Where {
  std::int64_t event = -1;  // index in events, -1 for the batch's own fields
  std::string_view field;   // "" for the event itself
  std::int64_t index = -1;  // element of an array field, -1 for the field itself
  Where at(std::string_view f) const { return Where{event, f, -1}; }
  Where elem(std::int64_t i) const { return Where{event, field, i}; }
  std::string str() const {
    std::string s = event >= 0 ? "events[" + std::to_string(event) + "]" : "batch";
    if (!field.empty()) s.append(": ").append(field);
    if (index >= 0) s.append("[").append(std::to_string(index)).append("]");
    return s;
  }
};

[[noreturn]] void fail_at(const Where& w, const std::string& what) {
  fail(w.str() + ": " + what);
}

[[noreturn]] void fail_type(const Where& w, const char* expected, const msgpack::object& got) {
  fail_at(w, std::string("expected ") + expected + ", got " + shown(got));
}

bool is_int(const msgpack::object& o) {
  return o.type == object_type::POSITIVE_INTEGER || o.type == object_type::NEGATIVE_INTEGER;
}

std::int64_t as_i64(const msgpack::object& o, const Where& w) {
  if (o.type == object_type::NEGATIVE_INTEGER) return o.via.i64;
  if (o.type == object_type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<std::uint64_t>(INT64_MAX)) fail_type(w, "an int64", o);
    return static_cast<std::int64_t>(o.via.u64);
  }
  fail_type(w, "an integer", o);
}

std::optional<std::int64_t> opt_i64(const msgpack::object& o, const Where& w) {
  if (o.type == object_type::NIL) return std::nullopt;
  return as_i64(o, w);
}

std::string opt_str(const msgpack::object& o, const Where& w, std::size_t max_bytes) {
  if (o.type == object_type::NIL) return {};
  if (o.type != object_type::STR) fail_type(w, "a string or nil", o);
  if (o.via.str.size > max_bytes) {
    fail_at(w, "expected a string of at most " + std::to_string(max_bytes) + " bytes, got " +
                   std::to_string(o.via.str.size) + " bytes");
  }
  return std::string(o.via.str.ptr, o.via.str.size);
}

std::uint64_t as_hash(const msgpack::object& o, const Where& w) {
  switch (o.type) {
    case object_type::POSITIVE_INTEGER:
      return o.via.u64;
    case object_type::NEGATIVE_INTEGER:
      return static_cast<std::uint64_t>(o.via.i64);  // two's complement: int64 and uint64 agree
    case object_type::BIN: {
      if (o.via.bin.size == 0) fail_at(w, "expected a non-empty bytes hash, got 0 bytes");
      // The last 8 bytes, big-endian: vLLM's own int form of its sha256 digests.
      const std::size_t n = std::min<std::size_t>(o.via.bin.size, 8);
      const auto* p = reinterpret_cast<const unsigned char*>(o.via.bin.ptr) + (o.via.bin.size - n);
      std::uint64_t h = 0;
      for (std::size_t i = 0; i < n; ++i) h = (h << 8) | p[i];
      return h;
    }
    default:
      fail_type(w, "an integer or bytes hash", o);
  }
}

std::vector<std::uint64_t> hashes(const msgpack::object& o, const Where& w) {
  if (o.type != object_type::ARRAY) fail_type(w, "an array of block hashes", o);
  std::vector<std::uint64_t> out;
  out.reserve(o.via.array.size);
  for (std::uint32_t i = 0; i < o.via.array.size; ++i)
    out.push_back(as_hash(o.via.array.ptr[i], w.elem(i)));
  return out;
}

std::optional<std::uint64_t> opt_hash(const msgpack::object& o, const Where& w) {
  if (o.type == object_type::NIL) return std::nullopt;
  return as_hash(o, w);
}

std::int64_t token_count(const msgpack::object& o, const Where& w) {
  if (o.type != object_type::ARRAY) fail_type(w, "an array of token ids", o);
  for (std::uint32_t i = 0; i < o.via.array.size; ++i) {
    if (!is_int(o.via.array.ptr[i]))
      fail_type(w.elem(i), "an integer token id", o.via.array.ptr[i]);
  }
  return o.via.array.size;
}

std::int64_t non_negative(const msgpack::object& o, const Where& w) {
  const std::int64_t v = as_i64(o, w);
  if (v < 0) fail_at(w, "expected a block size >= 0, got " + std::to_string(v));
  return v;
}

// A fingerprint of a msgpack value's type and contents (an extra_keys entry), depth-first.
std::uint64_t value_fingerprint(const msgpack::object& o, std::uint64_t h = 0x243F6A8885A308D3ull) {
  auto mix = [&h](std::uint64_t v) { h = kv_fingerprint_mix(h, v); };
  mix(static_cast<std::uint64_t>(o.type));
  switch (o.type) {
    case object_type::BOOLEAN:
      mix(o.via.boolean ? 1 : 0);
      break;
    case object_type::POSITIVE_INTEGER:
    case object_type::NEGATIVE_INTEGER:
      mix(o.via.u64);
      break;
    case object_type::FLOAT32:
    case object_type::FLOAT64: {
      std::uint64_t bits = 0;
      std::memcpy(&bits, &o.via.f64, sizeof bits);
      mix(bits);
      break;
    }
    case object_type::STR:
    case object_type::BIN: {
      const char* p = o.type == object_type::STR ? o.via.str.ptr : o.via.bin.ptr;
      const std::uint32_t n = o.type == object_type::STR ? o.via.str.size : o.via.bin.size;
      mix(n);
      for (std::uint32_t i = 0; i < n; ++i) mix(static_cast<unsigned char>(p[i]));
      break;
    }
    case object_type::ARRAY:
      mix(o.via.array.size);
      for (std::uint32_t i = 0; i < o.via.array.size; ++i)
        h = value_fingerprint(o.via.array.ptr[i], h);
      break;
    case object_type::MAP:
      mix(o.via.map.size);
      for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
        h = value_fingerprint(o.via.map.ptr[i].key, h);
        h = value_fingerprint(o.via.map.ptr[i].val, h);
      }
      break;
    default:
      break;
  }
  return h;
}

std::int64_t group_index(const msgpack::object& o, const Where& w) {
  if (o.type == object_type::NIL) return 0;
  const std::int64_t v = as_i64(o, w);
  if (v < 0 || v > INT32_MAX)
    fail_at(w, "expected a group index in [0, 2^31), got " + std::to_string(v));
  return v;
}

bool str_is(const msgpack::object& o, std::string_view s) {
  return o.type == object_type::STR && o.via.str.size == s.size() &&
         std::memcmp(o.via.str.ptr, s.data(), s.size()) == 0;
}

std::optional<KvEventKind> kind_of(const msgpack::object& tag) {
  for (KvEventKind k :
       {KvEventKind::kBlockStored, KvEventKind::kBlockRemoved, KvEventKind::kAllBlocksCleared}) {
    if (str_is(tag, kv_event_kind_name(k))) return k;
  }
  return std::nullopt;
}

// The named fields of each event, in their positional order (index 0 is the tag).
constexpr std::string_view kStoredFields[] = {
    "type",      "block_hashes",       "parent_block_hash",
    "token_ids", "block_size",         "lora_id",
    "medium",    "lora_name",          "extra_keys",
    "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"};
constexpr std::string_view kRemovedFields[] = {"type", "block_hashes", "medium", "group_idx"};

struct Decoder {
  const KvDecodeLimits& limits;
  KvEventBatch& out;
  // The current event's token_ids and extra_keys, read once all its fields are in (block_size
  // and lora_name may come after them).
  const msgpack::object* tokens = nullptr;
  const msgpack::object* extra = nullptr;

  // Sets one field of `ev` (names as in kStoredFields / kRemovedFields). Returns false for a
  // field this kind of event does not have, which the caller counts as skipped.
  bool field(KvStreamEvent& ev, std::string_view name, const msgpack::object& v, const Where& ew) {
    if (ev.kind == KvEventKind::kAllBlocksCleared) return false;  // it has no fields
    const Where w = ew.at(name);
    if (name == "block_hashes") {
      ev.block_hashes = hashes(v, w);
      return true;
    }
    if (name == "medium") {
      ev.medium = opt_str(v, w, limits.max_string_bytes);
      return true;
    }
    if (name == "group_idx") {
      ev.group_idx = group_index(v, w);
      return true;
    }
    if (name == "locality") {
      ev.locality = opt_str(v, w, limits.max_string_bytes);
      return true;
    }
    if (name == "ownership") {
      ev.ownership = opt_str(v, w, limits.max_string_bytes);
      return true;
    }
    if (ev.kind != KvEventKind::kBlockStored) return false;
    if (name == "parent_block_hash") {
      ev.parent_hash = opt_hash(v, w);
    } else if (name == "token_ids") {
      ev.num_token_ids = token_count(v, w);
      tokens = &v;
    } else if (name == "block_size") {
      ev.block_size = non_negative(v, w);
    } else if (name == "lora_id") {
      ev.lora_id = opt_i64(v, w);
    } else if (name == "lora_name") {
      ev.lora_name = opt_str(v, w, limits.max_string_bytes);
    } else if (name == "extra_keys") {
      if (v.type != object_type::NIL && v.type != object_type::ARRAY)
        fail_type(w, "an array of per-block extra keys or nil", v);
      extra = v.type == object_type::ARRAY ? &v : nullptr;
    } else if (name == "session_id") {
      ev.session_id = opt_str(v, w, limits.max_string_bytes);
    } else if (name == "cache_salt") {
      ev.cache_salt = opt_str(v, w, limits.max_string_bytes);
    } else if (name == "lookahead_token_ids") {
      ;  // tokens past each block that vLLM's lookahead hashing mixed in: not the block's own
    } else if (name == "kv_cache_spec_kind") {
      ev.spec_kind = opt_str(v, w, limits.max_string_bytes);
    } else if (name == "kv_cache_spec_sliding_window") {
      ev.sliding_window = opt_i64(v, w);
    } else {
      return false;
    }
    return true;
  }

  // Per block: the fingerprint of its token ids and of its extra keys (read from the payload,
  // still in scope). A store whose token_ids are not one block_size run per hash keeps no token
  // fingerprints (placeholders); extra_keys of another length than block_hashes is refused.
  void per_block(KvStreamEvent& ev, const Where& ew) {
    const std::size_t blocks = ev.block_hashes.size();
    if (ev.kind == KvEventKind::kBlockStored && ev.block_size == 0 && ev.num_token_ids > 0) {
      fail_at(ew.at("block_size"), "expected a positive block size for " +
                                       std::to_string(ev.num_token_ids) + " token ids, got 0");
    }
    if (tokens != nullptr && ev.block_size > 0 && blocks > 0 &&
        static_cast<std::uint64_t>(ev.num_token_ids) ==
            static_cast<std::uint64_t>(ev.block_size) * blocks) {
      std::vector<std::int64_t> ids(static_cast<std::size_t>(ev.block_size));
      ev.block_tokens.reserve(blocks);
      for (std::size_t b = 0; b < blocks; ++b) {
        for (std::size_t i = 0; i < ids.size(); ++i)
          ids[i] = static_cast<std::int64_t>(tokens->via.array.ptr[b * ids.size() + i].via.u64);
        ev.block_tokens.push_back(kv_token_fingerprint(ids.data(), ids.size()));
      }
    }
    if (extra != nullptr) {
      if (extra->via.array.size != blocks) {
        fail_at(ew.at("extra_keys"), "expected one entry per block hash (" +
                                         std::to_string(blocks) + "), got " +
                                         std::to_string(extra->via.array.size));
      }
      ev.block_extra.assign(blocks, 0);
      for (std::size_t b = 0; b < blocks; ++b) {
        const msgpack::object& entry = extra->via.array.ptr[b];
        if (entry.type != object_type::ARRAY) {
          if (entry.type != object_type::NIL) ev.block_extra[b] = value_fingerprint(entry) | 1;
          continue;
        }
        // vLLM puts the LoRA name first when lora_name is set: the namespace has it already.
        std::uint32_t first = 0;
        if (entry.via.array.size > 0 && !ev.lora_name.empty() &&
            str_is(entry.via.array.ptr[0], ev.lora_name))
          first = 1;
        if (entry.via.array.size == first) continue;
        std::uint64_t h = 0x243F6A8885A308D3ull;
        for (std::uint32_t i = first; i < entry.via.array.size; ++i)
          h = value_fingerprint(entry.via.array.ptr[i], h);
        ev.block_extra[b] = h | 1;
      }
    }
    tokens = extra = nullptr;
  }

  // The fields an event must carry to mean anything (the others may be absent).
  static void require(bool seen_hashes, bool seen_tokens, bool seen_size, KvEventKind kind,
                      const Where& ew) {
    if (kind == KvEventKind::kAllBlocksCleared) return;
    if (!seen_hashes) fail_at(ew.at("block_hashes"), "missing");
    if (kind != KvEventKind::kBlockStored) return;
    if (!seen_tokens) fail_at(ew.at("token_ids"), "missing");
    if (!seen_size) fail_at(ew.at("block_size"), "missing");
  }

  void positional(const msgpack::object& ev_obj, KvEventKind kind, const Where& ew) {
    KvStreamEvent ev;
    ev.kind = kind;
    const std::uint32_t n = ev_obj.via.array.size;
    std::size_t known = 1;
    if (kind == KvEventKind::kBlockStored) known = std::size(kStoredFields);
    if (kind == KvEventKind::kBlockRemoved) known = std::size(kRemovedFields);
    for (std::uint32_t i = 1; i < n; ++i) {
      if (i >= known) {
        ++out.skipped_fields;  // a field added after this decoder was written
        continue;
      }
      const std::string_view name =
          kind == KvEventKind::kBlockStored ? kStoredFields[i] : kRemovedFields[i];
      field(ev, name, ev_obj.via.array.ptr[i], ew);
    }
    require(n > 1, n > 3, n > 4, kind, ew);
    per_block(ev, ew);
    out.events.push_back(std::move(ev));
  }

  void tagged_map(const msgpack::object& ev_obj, KvEventKind kind, const Where& ew) {
    KvStreamEvent ev;
    ev.kind = kind;
    bool seen_hashes = false, seen_tokens = false, seen_size = false;
    for (std::uint32_t i = 0; i < ev_obj.via.map.size; ++i) {
      const msgpack::object_kv& kv = ev_obj.via.map.ptr[i];
      if (kv.key.type != object_type::STR) fail_type(ew, "string keys", kv.key);
      const std::string_view name(kv.key.via.str.ptr, kv.key.via.str.size);
      if (name == "type") continue;
      if (!field(ev, name, kv.val, ew)) {
        ++out.skipped_fields;
        continue;
      }
      seen_hashes |= name == "block_hashes";
      seen_tokens |= name == "token_ids";
      seen_size |= name == "block_size";
    }
    require(seen_hashes, seen_tokens, seen_size, kind, ew);
    per_block(ev, ew);
    out.events.push_back(std::move(ev));
  }

  void event(const msgpack::object& ev_obj, const Where& ew) {
    const msgpack::object* tag = nullptr;
    if (ev_obj.type == object_type::ARRAY) {
      if (ev_obj.via.array.size == 0) fail_at(ew, "expected a tagged event, got an empty array");
      tag = &ev_obj.via.array.ptr[0];
    } else if (ev_obj.type == object_type::MAP) {
      for (std::uint32_t i = 0; i < ev_obj.via.map.size; ++i) {
        if (str_is(ev_obj.via.map.ptr[i].key, "type")) tag = &ev_obj.via.map.ptr[i].val;
      }
      if (tag == nullptr) fail_at(ew.at("type"), "missing");
    } else {
      fail_type(ew, "an event (a tagged array or a map with \"type\")", ev_obj);
    }
    if (tag->type != object_type::STR) fail_type(ew.at("type"), "a string tag", *tag);
    const std::optional<KvEventKind> kind = kind_of(*tag);
    if (!kind) {
      ++out.skipped_events;  // an event type newer than this decoder: skipped, not fatal
      return;
    }
    if (ev_obj.type == object_type::ARRAY)
      positional(ev_obj, *kind, ew);
    else
      tagged_map(ev_obj, *kind, ew);
  }

  void events(const msgpack::object& evs) {
    if (evs.type != object_type::ARRAY) fail_type(Where{}.at("events"), "an array of events", evs);
    out.events.reserve(evs.via.array.size);
    for (std::uint32_t i = 0; i < evs.via.array.size; ++i)
      event(evs.via.array.ptr[i], Where{i, {}, -1});
  }

  static double timestamp(const msgpack::object& o) {
    if (o.type == object_type::FLOAT64 || o.type == object_type::FLOAT32) return o.via.f64;
    if (o.type == object_type::POSITIVE_INTEGER) return static_cast<double>(o.via.u64);
    if (o.type == object_type::NEGATIVE_INTEGER) return static_cast<double>(o.via.i64);
    fail_type(Where{}.at("ts"), "a float timestamp", o);
  }

  void rank(const msgpack::object& o) {
    if (o.type == object_type::NIL) return;
    const Where w = Where{}.at("data_parallel_rank");
    const std::int64_t r = as_i64(o, w);
    if (r < 0 || r > 65535) fail_at(w, "expected a rank in [0, 65535], got " + std::to_string(r));
    out.dp_rank = r;
  }

  void batch(const msgpack::object& root) {
    if (root.type == object_type::ARRAY) {
      if (root.via.array.size < 2)
        fail_type(Where{}, "[ts, events] or [ts, events, data_parallel_rank]", root);
      out.ts = timestamp(root.via.array.ptr[0]);
      if (root.via.array.size > 2) rank(root.via.array.ptr[2]);
      out.skipped_fields += root.via.array.size > 3 ? root.via.array.size - 3 : 0;
      events(root.via.array.ptr[1]);
      return;
    }
    if (root.type != object_type::MAP) fail_type(Where{}, "an EventBatch (array or map)", root);
    const msgpack::object* evs = nullptr;
    for (std::uint32_t i = 0; i < root.via.map.size; ++i) {
      const msgpack::object_kv& kv = root.via.map.ptr[i];
      if (str_is(kv.key, "ts"))
        out.ts = timestamp(kv.val);
      else if (str_is(kv.key, "events"))
        evs = &kv.val;
      else if (str_is(kv.key, "data_parallel_rank"))
        rank(kv.val);
      else
        ++out.skipped_fields;
    }
    if (evs == nullptr) fail_at(Where{}.at("events"), "missing");
    events(*evs);
  }
};

}  // namespace

namespace {
// Empties `b` but keeps its event vector's storage (a client decodes batch after batch into one).
void reset(KvEventBatch& b) {
  b.ts = 0.0;
  b.dp_rank.reset();
  b.events.clear();
  b.skipped_events = 0;
  b.skipped_fields = 0;
}
}  // namespace

bool decode_kv_event_batch(std::string_view payload, KvEventBatch& out, std::string& error,
                           const KvDecodeLimits& limits) {
  reset(out);
  error.clear();
  if (payload.empty()) {
    error = "expected a msgpack EventBatch, got an empty payload";
    return false;
  }
  if (payload.size() > limits.max_payload_bytes) {
    error = "expected a payload of at most " + std::to_string(limits.max_payload_bytes) +
            " bytes, got " + std::to_string(payload.size());
    return false;
  }
  try {
    BudgetVisitor budget(payload.size(), limits.max_depth);
    std::size_t off = 0;
    if (!msgpack::parse(payload.data(), payload.size(), off, budget)) {
      error = budget.reason().empty() ? "not msgpack" : budget.reason();
      return false;
    }
    if (off != payload.size()) {
      error = "expected one msgpack value, got " + std::to_string(payload.size() - off) +
              " more bytes after it";
      return false;
    }
    // The budget pass bounds what this allocates; the limits are a second guard.
    const msgpack::unpack_limit limit(payload.size(), payload.size(), payload.size(),
                                      payload.size(), payload.size(), limits.max_depth);
    off = 0;
    const msgpack::object_handle handle =
        msgpack::unpack(payload.data(), payload.size(), off, reference_all, nullptr, limit);
    Decoder{limits, out}.batch(handle.get());
    return true;
  } catch (const DecodeFailure& f) {
    error = f.reason;
  } catch (const std::bad_alloc&) {
    error = "out of memory decoding a payload of " + std::to_string(payload.size()) + " bytes";
  } catch (const std::exception& e) {  // msgpack's own errors (the pre-pass should catch all)
    error = std::string("msgpack: ") + e.what();
  }
  reset(out);
  return false;
}

}  // namespace kvscope

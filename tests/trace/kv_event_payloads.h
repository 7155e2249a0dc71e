// Golden KV-event payloads for the tests, written with msgpack-cxx's packer exactly as the engines
// lay them out: positional arrays with the tag first (older vLLM, SGLang) and tagged maps (newer
// vLLM). Small builders, so each test spells out the bytes it feeds the decoder.
#pragma once

#include <msgpack.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace kvscope::test {

// A block hash as an engine sends it.
using WireHash = std::variant<std::uint64_t, std::int64_t, std::string /* raw bytes */>;

class Packer {
 public:
  Packer() : pk_(buf_) {}
  std::string bytes() const { return std::string(buf_.data(), buf_.size()); }
  Packer& array(std::uint32_t n) {
    pk_.pack_array(n);
    return *this;
  }
  Packer& map(std::uint32_t n) {
    pk_.pack_map(n);
    return *this;
  }
  Packer& nil() {
    pk_.pack_nil();
    return *this;
  }
  Packer& str(const std::string& s) {
    pk_.pack(s);
    return *this;
  }
  Packer& u64(std::uint64_t v) {
    pk_.pack_uint64(v);
    return *this;
  }
  Packer& i64(std::int64_t v) {
    pk_.pack_int64(v);
    return *this;
  }
  Packer& f64(double v) {
    pk_.pack_double(v);
    return *this;
  }
  Packer& bin(const std::string& b) {
    pk_.pack_bin(static_cast<std::uint32_t>(b.size()));
    pk_.pack_bin_body(b.data(), static_cast<std::uint32_t>(b.size()));
    return *this;
  }
  Packer& hash(const WireHash& h) {
    if (const auto* u = std::get_if<std::uint64_t>(&h)) return u64(*u);
    if (const auto* i = std::get_if<std::int64_t>(&h)) return i64(*i);
    return bin(std::get<std::string>(h));
  }
  Packer& hashes(const std::vector<WireHash>& hs) {
    array(static_cast<std::uint32_t>(hs.size()));
    for (const WireHash& h : hs) hash(h);
    return *this;
  }
  Packer& opt_hash(const std::optional<WireHash>& h) { return h ? hash(*h) : nil(); }
  Packer& tokens(std::size_t n) {
    array(static_cast<std::uint32_t>(n));
    for (std::size_t i = 0; i < n; ++i) u64(i);
    return *this;
  }
  Packer& raw(const std::string& bytes) {  // already-packed msgpack appended as is
    buf_.write(bytes.data(), bytes.size());
    return *this;
  }

 private:
  msgpack::sbuffer buf_;
  msgpack::packer<msgpack::sbuffer> pk_;
};

// Positional events, packed alone (to splice into a batch with Packer::raw).
inline std::string stored_array(const std::vector<WireHash>& hashes,
                                const std::optional<WireHash>& parent, std::int64_t block_size,
                                const char* medium = nullptr) {
  Packer p;
  p.array(medium ? 7 : 6).str("BlockStored").hashes(hashes).opt_hash(parent);
  p.tokens(hashes.size() * static_cast<std::size_t>(block_size)).i64(block_size).nil();
  if (medium) p.str(medium);
  return p.bytes();
}
inline std::string removed_array(const std::vector<WireHash>& hashes,
                                 const char* medium = nullptr) {
  Packer p;
  p.array(medium ? 3 : 2).str("BlockRemoved").hashes(hashes);
  if (medium) p.str(medium);
  return p.bytes();
}
inline std::string cleared_array() {
  Packer p;
  p.array(1).str("AllBlocksCleared");
  return p.bytes();
}

// [ts, [events...]] (SGLang) or [ts, [events...], rank] (vLLM with data parallelism).
inline std::string batch_array(double ts, const std::vector<std::string>& events,
                               std::optional<std::int64_t> rank = std::nullopt) {
  Packer p;
  p.array(rank ? 3 : 2).f64(ts).array(static_cast<std::uint32_t>(events.size()));
  for (const std::string& e : events) p.raw(e);
  if (rank) p.i64(*rank);
  return p.bytes();
}

// A 32-byte digest-like hash whose last 8 bytes are `low` big-endian.
inline std::string digest(std::uint64_t low, unsigned char fill = 0xab) {
  std::string b(32, static_cast<char>(fill));
  for (int i = 0; i < 8; ++i) b[31 - i] = static_cast<char>((low >> (8 * i)) & 0xff);
  return b;
}

}  // namespace kvscope::test

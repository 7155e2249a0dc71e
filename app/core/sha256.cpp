// SHA-256, written from FIPS 180-4 section 6.2 (checked in tests against its published examples
// and against sha256sum's digest of the shipped models).
#include "app/core/sha256.h"

#include <cstdio>
#include <fstream>
#include <vector>

#include "engine/common/error.h"

namespace kvscope::ui {

namespace {

constexpr std::uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr std::uint32_t rotr(std::uint32_t x, int n) {
  return (x >> n) | (x << (32 - n));
}

}  // namespace

Sha256::Sha256()
    : state_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
             0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256::compress(const unsigned char* block) {
  // The message schedule: 16 big-endian words of the block, extended to 64.
  std::uint32_t w[64];
  for (int i = 0; i < 16; ++i) {
    w[i] = (std::uint32_t{block[4 * i]} << 24) | (std::uint32_t{block[4 * i + 1]} << 16) |
           (std::uint32_t{block[4 * i + 2]} << 8) | std::uint32_t{block[4 * i + 3]};
  }
  for (int i = 16; i < 64; ++i) {
    const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  // 64 rounds over the working variables, then added into the state.
  std::uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3], e = state_[4],
                f = state_[5], g = state_[6], h = state_[7];
  for (int i = 0; i < 64; ++i) {
    const std::uint32_t t1 =
        h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[i] + w[i];
    const std::uint32_t t2 =
        (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

void Sha256::update(std::span<const unsigned char> bytes) {
  total_bytes_ += bytes.size();
  std::size_t at = 0;
  if (pending_size_ > 0) {  // top up the pending block first
    while (pending_size_ < 64 && at < bytes.size()) pending_[pending_size_++] = bytes[at++];
    if (pending_size_ < 64) return;
    compress(pending_.data());
    pending_size_ = 0;
  }
  for (; at + 64 <= bytes.size(); at += 64) compress(bytes.data() + at);
  while (at < bytes.size()) pending_[pending_size_++] = bytes[at++];
}

std::string Sha256::hex_digest() {
  // Padding: 0x80, zeros up to 56 bytes mod 64, then the message length in bits, big-endian.
  const std::uint64_t bits = total_bytes_ * 8;
  const unsigned char one = 0x80, zero = 0;
  update({&one, 1});
  while (pending_size_ != 56) update({&zero, 1});
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
  update(length);
  std::string out;
  char hex[9];
  for (std::uint32_t word : state_) {
    std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(word));
    out += hex;
  }
  return out;
}

std::string sha256_hex(std::span<const unsigned char> bytes) {
  Sha256 h;
  h.update(bytes);
  return h.hex_digest();
}

std::string sha256_file_hex(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, "cannot open the file to hash it");
  Sha256 h;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const std::streamsize got = in.gcount();
    if (got > 0) {
      h.update(
          {reinterpret_cast<const unsigned char*>(buffer.data()), static_cast<std::size_t>(got)});
    }
  }
  if (in.bad()) throw Error(path, "read error while hashing the file");
  return h.hex_digest();
}

}  // namespace kvscope::ui

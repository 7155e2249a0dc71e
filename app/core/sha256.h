// SHA-256 (FIPS 180-4) of bytes and of whole files: the content identity of the model and text a
// shipped quality sweep was computed from (app/core/quality_shipped.h), the same digest
// scripts/models.sh pins, so a model copied, renamed or re-fetched still matches and a different
// file never does.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace kvscope::ui {

class Sha256 {
 public:
  Sha256();
  void update(std::span<const unsigned char> bytes);
  // The digest as 64 lowercase hex digits; the object is spent afterwards.
  std::string hex_digest();

 private:
  void compress(const unsigned char* block);  // one 64-byte block into state_
  std::array<std::uint32_t, 8> state_;
  std::array<unsigned char, 64> pending_{};  // bytes not yet compressed
  std::size_t pending_size_ = 0;
  std::uint64_t total_bytes_ = 0;
};

std::string sha256_hex(std::span<const unsigned char> bytes);
// The whole file, read in 1 MiB pieces (SmolLM2's 98 MB take about half a second). Throws
// kvscope::Error naming the file when it cannot be opened or read.
std::string sha256_file_hex(const std::string& path);

}  // namespace kvscope::ui

// The llama2.c tokenizer: BPE by merge score with byte fallback, and decoding with the
// leading-space rule after BOS. Byte-for-byte compatible with llama2.c's run.c.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvscope {

inline constexpr int kTokenUnk = 0;
inline constexpr int kTokenBos = 1;
inline constexpr int kTokenEos = 2;

class Tokenizer {
 public:
  // Loads tokenizer.bin; throws kvscope::Error when it is malformed or its vocabulary size is not
  // `expected_vocab_size` (the model's), or when it has fewer than 259 tokens (3 specials and the
  // 256 byte-fallback tokens encode() relies on).
  Tokenizer(const std::string& path, int expected_vocab_size);

  int vocab_size() const { return static_cast<int>(pieces_.size()); }
  const std::string& path() const { return path_; }

  // Encodes text: optional BOS, a dummy space prefix when text is not empty, UTF-8 code points
  // (byte fallback for unknown ones), then greedy merges by highest score; optional EOS.
  std::vector<int> encode(std::string_view text, bool bos, bool eos) const;

  // The bytes token `token` stands for when it follows `prev_token` (leading space dropped after
  // BOS; <0xNN> byte tokens become that byte).
  std::string decode(int prev_token, int token) const;

  // Decodes a whole sequence (starting after a virtual BOS when the first token is BOS).
  std::string decode_all(const std::vector<int>& tokens) const;

  const std::string& piece(int token) const { return pieces_.at(static_cast<std::size_t>(token)); }

 private:
  int lookup(std::string_view s) const;
  std::string path_;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int> ids_;
  int max_token_length_ = 0;
};

// Whether run.c's safe_printf would print this piece (it drops single non-printable bytes).
bool is_printable_piece(const std::string& piece);

}  // namespace kvscope

// Tokenizer: loading and validating tokenizer.bin, BPE encode, decode.
#include "engine/model/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "engine/common/error.h"
#include "engine/common/mapped_file.h"

namespace kvscope {

Llama2cTokenizer::Llama2cTokenizer(const std::string& path, int expected_vocab_size) : path_(path) {
  MappedFile file(path);
  auto bytes = file.bytes();
  std::size_t off = 0;
  auto need = [&](std::size_t n, const std::string& what) {
    if (off + n > bytes.size()) {
      fail_expected(path + ": byte " + std::to_string(off),
                    what + " (" + std::to_string(n) + " bytes)",
                    "end of file after " + std::to_string(pieces_.size()) + " tokens");
    }
  };
  std::int32_t max_len = 0;
  need(4, "max_token_length");
  std::memcpy(&max_len, bytes.data(), 4);
  off = 4;
  if (max_len <= 0 || max_len > 4096) {
    fail_expected(path + ": max_token_length", "an integer in [1, 4096]", std::to_string(max_len));
  }
  max_token_length_ = max_len;
  // Read every entry in the file so a vocabulary mismatch can say how many there are.
  while (off < bytes.size()) {
    float score;
    std::int32_t len;
    need(8, "token " + std::to_string(pieces_.size()) + " score and length");
    std::memcpy(&score, bytes.data() + off, 4);
    std::memcpy(&len, bytes.data() + off + 4, 4);
    off += 8;
    if (len < 0 || len > max_len) {
      fail_expected(path + ": token " + std::to_string(pieces_.size()) + " length",
                    "an integer in [0, " + std::to_string(max_len) + "]", std::to_string(len));
    }
    need(static_cast<std::size_t>(len), "token " + std::to_string(pieces_.size()) + " bytes");
    pieces_.emplace_back(reinterpret_cast<const char*>(bytes.data() + off),
                         static_cast<std::size_t>(len));
    scores_.push_back(score);
    off += static_cast<std::size_t>(len);
  }
  validate_and_index(expected_vocab_size);
}

Llama2cTokenizer::Llama2cTokenizer(std::string path, std::vector<std::string> pieces,
                                   std::vector<float> scores, int expected_vocab_size)
    : path_(std::move(path)), pieces_(std::move(pieces)), scores_(std::move(scores)) {
  if (scores_.size() != pieces_.size()) {
    fail_expected(path_ + ": token scores", std::to_string(pieces_.size()) + " (one per token)",
                  std::to_string(scores_.size()));
  }
  for (const std::string& p : pieces_) {
    max_token_length_ = std::max(max_token_length_, static_cast<int>(p.size()));
  }
  validate_and_index(expected_vocab_size);
}

void Llama2cTokenizer::validate_and_index(int expected_vocab_size) {
  const std::string& path = path_;
  if (vocab_size() != expected_vocab_size) {
    fail_expected(path + ": vocabulary size",
                  std::to_string(expected_vocab_size) + " tokens (the model's vocab_size)",
                  std::to_string(vocab_size()) + " tokens; is this the model's tokenizer?");
  }
  // encode() falls back to ids 3..258 for bytes and emits BOS/EOS: those ids must exist.
  if (vocab_size() < 3 + 256) {
    fail_expected(path + ": vocabulary size",
                  "at least 259 tokens (<unk>, <s>, </s>, then the 256 byte tokens)",
                  std::to_string(vocab_size()) + " tokens");
  }
  for (int i = 0; i < vocab_size(); ++i) ids_.emplace(pieces_[static_cast<std::size_t>(i)], i);
}

int Llama2cTokenizer::lookup(std::string_view s) const {
  auto it = ids_.find(std::string(s));
  return it == ids_.end() ? -1 : it->second;
}

std::vector<int> Llama2cTokenizer::encode(std::string_view text, bool bos, bool eos) const {
  std::vector<int> tokens;
  tokens.reserve(text.size() + 3);
  if (bos) tokens.push_back(kTokenBos);
  auto push_bytes = [&](std::string_view s) {
    for (unsigned char ch : s) tokens.push_back(static_cast<int>(ch) + 3);
  };
  if (!text.empty()) {
    int dummy = lookup(" ");
    if (dummy >= 0)
      tokens.push_back(dummy);
    else
      push_bytes(" ");
  }
  // Split into UTF-8 code points (at most 4 bytes); unknown ones fall back to byte tokens.
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t j = i + 1;
    while (j < text.size() && (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80 && j - i < 4)
      ++j;
    std::string_view cp = text.substr(i, j - i);
    int id = lookup(cp);
    if (id >= 0)
      tokens.push_back(id);
    else
      push_bytes(cp);
    i = j;
  }
  // Merge the adjacent pair whose merged piece has the best score until none is left.
  std::string buf;
  while (true) {
    float best_score = -1e10f;
    int best_id = -1;
    std::size_t best_idx = 0;
    for (std::size_t k = 0; k + 1 < tokens.size(); ++k) {
      buf = pieces_[static_cast<std::size_t>(tokens[k])];
      buf += pieces_[static_cast<std::size_t>(tokens[k + 1])];
      int id = lookup(buf);
      if (id >= 0 && scores_[static_cast<std::size_t>(id)] > best_score) {
        best_score = scores_[static_cast<std::size_t>(id)];
        best_id = id;
        best_idx = k;
      }
    }
    if (best_id < 0) break;
    tokens[best_idx] = best_id;
    tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best_idx) + 1);
  }
  if (eos) tokens.push_back(kTokenEos);
  return tokens;
}

std::string Llama2cTokenizer::decode(int prev_token, int token) const {
  const std::string& p = piece(token);
  std::string_view s = p;
  if (prev_token == kTokenBos && !s.empty() && s[0] == ' ') s.remove_prefix(1);
  // Byte tokens look like "<0x0A>".
  if (s.size() == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>' &&
      std::isxdigit(static_cast<unsigned char>(s[3])) &&
      std::isxdigit(static_cast<unsigned char>(s[4]))) {
    char byte = static_cast<char>(std::stoi(std::string(s.substr(3, 2)), nullptr, 16));
    return std::string(1, byte);
  }
  return std::string(s);
}

std::string Llama2cTokenizer::decode_all(const std::vector<int>& tokens) const {
  std::string out;
  int prev = kTokenBos;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (i == 0 && tokens[0] == kTokenBos) continue;
    out += decode(prev, tokens[i]);
    prev = tokens[i];
  }
  return out;
}

bool Llama2cTokenizer::is_printable(const std::string& piece) const {
  return is_printable_piece(piece);
}

bool is_printable_piece(const std::string& piece) {
  if (piece.size() == 1) {
    unsigned char c = static_cast<unsigned char>(piece[0]);
    return std::isprint(c) || std::isspace(c);
  }
  return !piece.empty();
}

}  // namespace kvscope

// TokenText: the text a run's token ids stand for, as the UI's text panels show it. A scenario run
// takes it from its tokenizer (engine/model/tokenizer_text.h); a recording carries the decoded
// piece of every id it uses (RecordedText), so it shows the same text without the tokenizer file.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvscope {

// Token ids a recording's token text may hold: the loader's bound for token indices (the largest
// vocabulary in use, Llama 3's 128,256, is far below it).
inline constexpr int kMaxRecordedTokenId = (1 << 24) - 1;

class TokenText {
 public:
  // `bos_id`: the id sequences start with, -1 when none. `prompts`: [sequence id] prompt ids.
  TokenText(int bos_id, std::vector<std::vector<int>> prompts)
      : bos_id_(bos_id), prompts_(std::move(prompts)) {}
  virtual ~TokenText() = default;
  TokenText(const TokenText&) = delete;
  TokenText& operator=(const TokenText&) = delete;

  int bos_id() const { return bos_id_; }
  // [sequence id] prompt token ids (parallel samples repeat their request's prompt).
  const std::vector<std::vector<int>>& prompts() const { return prompts_; }
  std::span<const int> prompt(int sequence) const {
    if (sequence < 0 || static_cast<std::size_t>(sequence) >= prompts_.size()) return {};
    return prompts_[static_cast<std::size_t>(sequence)];
  }
  // The text `token` stands for when it follows `prev_token` (-1: a token that is not BOS), or
  // nullopt when there is none (an id outside the vocabulary, or one a recording has no piece
  // for). The tokenizers differ by prev_token only in whether it is BOS (llama2.c's tokenizer
  // drops a leading space after BOS), so a recording keeps at most two texts per id.
  virtual std::optional<std::string> decode(int prev_token, int token) const = 0;

 private:
  int bos_id_;
  std::vector<std::vector<int>> prompts_;
};

// The token text a recording carries (Timeline::load builds it; saving it again writes the same
// bytes).
class RecordedText final : public TokenText {
 public:
  struct Piece {
    std::string text;                      // the bytes after a token that is not BOS
    std::optional<std::string> after_bos;  // the bytes after BOS, when they differ
    bool operator==(const Piece&) const = default;
  };
  RecordedText(int bos_id, std::vector<std::vector<int>> prompts, std::map<int, Piece> pieces)
      : TokenText(bos_id, std::move(prompts)), pieces_(std::move(pieces)) {}
  std::optional<std::string> decode(int prev_token, int token) const override {
    const auto it = pieces_.find(token);
    if (it == pieces_.end()) return std::nullopt;
    if (bos_id() >= 0 && prev_token == bos_id() && it->second.after_bos)
      return *it->second.after_bos;
    return it->second.text;
  }
  const std::map<int, Piece>& pieces() const { return pieces_; }  // by token id

 private:
  std::map<int, Piece> pieces_;
};

}  // namespace kvscope

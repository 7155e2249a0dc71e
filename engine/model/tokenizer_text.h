// TokenizerText: a run's token text taken from its tokenizer. The Simulator puts one in its
// Timeline's header, so the live text panel and the recording it saves decode ids the same way.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/model/tokenizer.h"
#include "engine/trace/token_text.h"

namespace kvscope {

class TokenizerText final : public TokenText {
 public:
  // `tokenizer` must not be null; `prompts`: [sequence id] prompt token ids.
  TokenizerText(std::shared_ptr<const Tokenizer> tokenizer, std::vector<std::vector<int>> prompts)
      : TokenText(tokenizer->bos_id(), std::move(prompts)), tokenizer_(std::move(tokenizer)) {}
  // Tokenizer::decode, for ids in the vocabulary.
  std::optional<std::string> decode(int prev_token, int token) const override {
    if (token < 0 || token >= tokenizer_->vocab_size()) return std::nullopt;
    return tokenizer_->decode(prev_token, token);
  }
  const Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
};

}  // namespace kvscope

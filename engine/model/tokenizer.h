// Tokenizer: the interface every model's tokenizer implements, and the llama2.c tokenizer (BPE by
// merge score with byte fallback, leading-space rule after BOS; byte-for-byte run.c compatible).
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvscope {

// llama2.c's special ids (tok512.bin and tokenizer.bin put <unk>, <s>, </s> first).
inline constexpr int kTokenUnk = 0;
inline constexpr int kTokenBos = 1;
inline constexpr int kTokenEos = 2;

// What every tokenizer offers the engine: encode, decode one token after another, its special ids.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual int vocab_size() const = 0;
  // The file it was loaded from.
  virtual const std::string& path() const = 0;
  // The id a sequence starts with (BOS), and the ids that end a generation.
  virtual int bos_id() const = 0;
  virtual bool is_stop(int token) const = 0;

  // Encodes text, with BOS first and EOS last when asked.
  virtual std::vector<int> encode(std::string_view text, bool bos, bool eos) const = 0;
  // The bytes token `token` stands for when it follows `prev_token`.
  virtual std::string decode(int prev_token, int token) const = 0;
  // Decodes a whole sequence (what the text of these ids reads as).
  virtual std::string decode_all(const std::vector<int>& tokens) const = 0;
  // The vocabulary entry of `token`, as stored (no byte decoding).
  virtual const std::string& piece(int token) const = 0;
  // Whether encoding a prompt starts with BOS (the model's convention).
  virtual bool adds_bos() const { return false; }
  // Whether generation prints this decoded piece (llama2.c's run.c drops lone control bytes).
  virtual bool is_printable(const std::string& /*piece*/) const { return true; }
};

class Llama2cTokenizer final : public Tokenizer {
 public:
  // Loads tokenizer.bin; throws kvscope::Error when it is malformed or its vocabulary size is not
  // `expected_vocab_size` (the model's), or when it has fewer than 259 tokens (3 specials and the
  // 256 byte-fallback tokens encode() relies on).
  Llama2cTokenizer(const std::string& path, int expected_vocab_size);
  // The same tokenizer from pieces and scores held elsewhere (a GGUF "llama" vocabulary, with
  // SentencePiece's U+2581 already turned into spaces); `path` names their file in errors.
  Llama2cTokenizer(std::string path, std::vector<std::string> pieces, std::vector<float> scores,
                   int expected_vocab_size);

  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  const std::string& path() const override { return path_; }
  int bos_id() const override { return kTokenBos; }
  // run.c stops at BOS; EOS ends a sequence too.
  bool is_stop(int token) const override { return token == kTokenBos || token == kTokenEos; }
  bool adds_bos() const override { return true; }
  bool is_printable(const std::string& piece) const override;

  // Encodes text: optional BOS, a dummy space prefix when text is not empty, UTF-8 code points
  // (byte fallback for unknown ones), then greedy merges by highest score; optional EOS.
  std::vector<int> encode(std::string_view text, bool bos, bool eos) const override;

  // The bytes token `token` stands for when it follows `prev_token` (leading space dropped after
  // BOS; <0xNN> byte tokens become that byte).
  std::string decode(int prev_token, int token) const override;

  // Decodes a whole sequence (starting after a virtual BOS when the first token is BOS).
  std::string decode_all(const std::vector<int>& tokens) const override;

  const std::string& piece(int token) const override {
    return pieces_.at(static_cast<std::size_t>(token));
  }

 private:
  void validate_and_index(int expected_vocab_size);
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

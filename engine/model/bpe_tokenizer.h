// BpeTokenizer: the byte-level BPE tokenizer of GPT-2-style GGUF vocabularies (tokenizer.ggml.model
// "gpt2"), matching llama.cpp's tokenization with special-token parsing on (SmolLM2, StarCoder).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/model/tokenizer.h"

namespace kvscope {

// ggml token types (tokenizer.ggml.token_type).
enum class GgmlTokenType : int {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// A GPT-2-style vocabulary as a GGUF file stores it.
struct BpeVocab {
  std::string path;                           // the file it came from (for errors and path())
  std::vector<std::string> tokens;            // [vocab] token text, GPT-2 byte-to-unicode encoded
  std::vector<int> token_types;               // [vocab] ggml token types (empty = all normal)
  std::vector<std::string> merges;            // ranked merges, "left right" (rank = index)
  std::string pre;                            // pre-tokenizer name: "smollm", "starcoder" or "gpt2"
  int bos_id = -1, eos_id = -1, unk_id = -1;  // -1 = none (unk_id: validated, unused by BPE)
  std::vector<int> extra_stop_ids;  // ids that end a generation besides eos_id (<|endoftext|>)
};

class BpeTokenizer final : public Tokenizer {
 public:
  // Validates the vocabulary; throws a one-line kvscope::Error naming the file, the GGUF field, the
  // value and what was expected: empty vocabulary, duplicate token text, token_types of the wrong
  // length or an unknown type, a merge that is not "left right" or whose pieces (or their
  // concatenation) are not tokens, an id out of range, an unsupported pre-tokenizer.
  explicit BpeTokenizer(BpeVocab vocab);

  int vocab_size() const override { return static_cast<int>(tokens_.size()); }
  const std::string& path() const override { return path_; }
  int bos_id() const override { return bos_id_; }
  int eos_id() const { return eos_id_; }
  // eos_id or one of extra_stop_ids.
  bool is_stop(int token) const override;

  // Splits out control and user-defined token texts (longest first), pre-tokenizes the rest
  // (digits one by one for smollm/starcoder, then the GPT-2 pattern) and BPE-merges each
  // pre-token's bytes by merge rank. Invalid UTF-8 bytes are encoded as their byte tokens; a byte
  // the vocabulary has no token for is left out (llama.cpp does the same).
  std::vector<int> encode(std::string_view text, bool bos, bool eos) const override;
  // The bytes of `token` (control and user-defined tokens: their text); prev_token is unused.
  std::string decode(int prev_token, int token) const override;
  std::string decode_all(const std::vector<int>& tokens) const override;
  const std::string& piece(int token) const override;

 private:
  enum class PreTokenizer { kGpt2, kDigitsThenGpt2 };
  struct MergeResult {
    int rank;
    int id;
  };

  void check_id(int token) const;
  // Encodes text without special tokens: pre-tokenize, then BPE each pre-token.
  void encode_text(std::string_view text, std::vector<int>& out) const;
  // BPE over the bytes of one pre-token.
  void encode_word(std::string_view word, std::vector<int>& out) const;

  std::string path_;
  std::vector<std::string> tokens_;   // [vocab] as stored
  std::vector<std::string> decoded_;  // [vocab] the bytes each token stands for
  // (left id << 32 | right id) -> merge rank and the merged token's id.
  std::unordered_map<std::uint64_t, MergeResult> merges_;
  std::array<int, 256> byte_ids_{};  // [byte] the id of its one-character token, -1 if none
  std::vector<int> special_ids_;     // control and user-defined ids, longest text first
  std::vector<int> stop_ids_;        // eos_id and extra_stop_ids
  PreTokenizer pre_ = PreTokenizer::kGpt2;
  int bos_id_ = -1;
  int eos_id_ = -1;
};

}  // namespace kvscope

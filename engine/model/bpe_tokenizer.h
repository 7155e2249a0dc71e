// BpeTokenizer: the byte-level BPE tokenizer of GPT-2-style GGUF vocabularies (tokenizer.ggml.model
// "gpt2"), matching llama.cpp's tokenization with special-token parsing on (SmolLM2, StarCoder),
// and of Hugging Face tokenizer.json files (engine/model/tokenizer_json.h), matching `tokenizers`.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/model/pre_tokenizer.h"
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

// A GPT-2-style vocabulary as a GGUF file stores it. The fields after extra_stop_ids describe what
// Hugging Face's tokenizer.json can ask for; their defaults are llama.cpp's GGUF behaviour.
struct BpeVocab {
  std::string path;                           // the file it came from (for errors and path())
  std::vector<std::string> tokens;            // [vocab] token text, GPT-2 byte-to-unicode encoded
  std::vector<int> token_types;               // [vocab] ggml token types (empty = all normal)
  std::vector<std::string> merges;            // ranked merges, "left right" (rank = index)
  std::string pre;                            // pre-tokenizer name: "smollm", "starcoder" or "gpt2"
  int bos_id = -1, eos_id = -1, unk_id = -1;  // -1 = none (unk_id: unused unless unk_bytes)
  std::vector<int> extra_stop_ids;  // ids that end a generation besides eos_id (<|endoftext|>)

  // How errors name the token and merge lists (tokenizer.json: "model.vocab", "model.merges").
  std::string tokens_field = "tokenizer.ggml.tokens";
  std::string merges_field = "tokenizer.ggml.merges";
  // When set: the pre-tokenizer's steps (`pre` is unused; no step: the text is one piece).
  std::optional<std::vector<PreSplit>> pre_splits;
  // Hugging Face's rules where they differ from llama.cpp's: added tokens (control and
  // user-defined) are matched leftmost-longest, not longest first, those in `normalized_added` in
  // each normalized piece of text between the others; a byte without a token (and no unk_bytes)
  // is dropped before merging, so its neighbours may merge; a repeated merge takes its last rank;
  // a token decodes as bytes when all its characters are byte characters (added tokens too),
  // else as its text.
  bool hf_rules = false;
  std::vector<int> normalized_added;
  bool nfc = false;            // text between added tokens is NFC-normalized before splitting
  bool ignore_merges = false;  // a pre-token that is a token as a whole is that token, unmerged
  bool unk_bytes = false;      // a byte without a token becomes unk_id (else it is left out)
  bool fuse_unk = false;       // with unk_bytes: a run of such bytes becomes one unk_id
  bool adds_bos = false;       // Tokenizer::adds_bos()
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

  bool adds_bos() const override { return adds_bos_; }

  // Splits out control and user-defined token texts (longest first), pre-tokenizes the rest
  // (digits one by one for smollm/starcoder, then the GPT-2 pattern) and BPE-merges each
  // pre-token's bytes by merge rank. Invalid UTF-8 bytes are encoded as their byte tokens; a byte
  // the vocabulary has no token for is left out (llama.cpp does the same). The BpeVocab fields
  // for tokenizer.json files change these steps as described there.
  std::vector<int> encode(std::string_view text, bool bos, bool eos) const override;
  // The bytes of `token` (control and user-defined tokens: their text; with hf_rules, as Hugging
  // Face decodes); prev_token is unused.
  std::string decode(int prev_token, int token) const override;
  std::string decode_all(const std::vector<int>& tokens) const override;
  const std::string& piece(int token) const override;

 private:
  struct MergeResult {
    int rank;
    int id;
  };
  // Added tokens to cut text at.
  struct AddedTokens {
    std::vector<int> ids;                             // longest text first
    std::array<std::vector<int>, 256> by_first_byte;  // [first byte] ids, longest first
  };
  // A piece of text to encode: raw text [begin, end) or an added token (id >= 0).
  struct Fragment {
    std::size_t begin, end;
    int id;  // -1 for raw text
  };

  void check_id(int token) const;
  // The constructor's steps, in the order it checks the vocabulary.
  void fill_and_check_token_types(std::vector<int>& types) const;
  std::unordered_map<std::string_view, int> index_token_texts(
      const std::string& tokens_field) const;
  void set_special_ids(const BpeVocab& vocab);
  void set_pre_tokenizer(BpeVocab& vocab);
  void build_merges(const BpeVocab& vocab, const std::unordered_map<std::string_view, int>& ids);
  void index_bytes_and_whole_tokens(const std::unordered_map<std::string_view, int>& ids);
  void build_decoded_and_added(const BpeVocab& vocab, const std::vector<int>& types);
  void index_added(AddedTokens& set, std::vector<int> ids) const;
  // Cuts text at the added tokens of `set`: longest first, or leftmost-longest (hf_rules).
  std::vector<Fragment> split_added(std::string_view text, const AddedTokens& set) const;
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
  AddedTokens added_;                // control and user-defined tokens matched in the text as given
  AddedTokens normalized_added_;     // hf_rules: those matched after normalization
  std::vector<int> stop_ids_;        // eos_id and extra_stop_ids
  std::vector<PreSplit> pre_;        // the pre-tokenizer's steps
  // ignore_merges: token text -> id, to find pre-tokens that are tokens as a whole.
  std::unordered_map<std::string, int> whole_ids_;
  int bos_id_ = -1;
  int eos_id_ = -1;
  int unk_id_ = -1;  // unk_bytes: what a byte without a token becomes
  bool hf_rules_ = false;
  bool nfc_ = false;
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
  bool adds_bos_ = false;
};

// Whether a control token with this text ends a turn or a document in common chat vocabularies
// (<|endoftext|>, <|im_end|>, <|eot_id|>, ...; llama.cpp treats the same texts as
// end-of-generation).
bool is_end_of_generation_text(std::string_view text);

// A value for an error message: quoted, quotes and control bytes escaped, cut after 48 bytes.
std::string quoted_value(std::string_view s);

}  // namespace kvscope

// BpeTokenizer: vocabulary validation, added-token splitting (llama.cpp's and Hugging Face's
// ways), normalization, rank-ordered byte-level BPE, and byte decoding. The pre-tokenizers are in
// pre_tokenizer.cpp.
#include "engine/model/bpe_tokenizer.h"

#include <algorithm>
#include <queue>

#include "engine/common/error.h"
#include "engine/model/unicode_nfc.h"
#include "engine/model/utf8.h"

namespace kvscope {
namespace {

// GPT-2's byte-to-unicode map: printable Latin-1 bytes stand for themselves, the other 68 bytes
// (controls, space, DEL, NBSP, soft hyphen) for U+0100.. in byte order, so every byte is printable.
constexpr std::array<char32_t, 256> make_byte_chars() {
  std::array<char32_t, 256> chars{};
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    chars[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
  }
  return chars;
}
constexpr std::array<char32_t, 256> kByteChars = make_byte_chars();  // [byte] its code point
constexpr char32_t kByteCharsEnd = 0x144;  // every byte's code point is below this

// [code point < kByteCharsEnd] the byte it stands for, -1 when none.
constexpr std::array<int, kByteCharsEnd> make_char_bytes() {
  std::array<int, kByteCharsEnd> bytes{};
  bytes.fill(-1);
  for (int b = 0; b < 256; ++b) bytes[kByteChars[static_cast<std::size_t>(b)]] = b;
  return bytes;
}
constexpr std::array<int, kByteCharsEnd> kCharBytes = make_char_bytes();

// The bytes a normal token stands for: each code point of its text mapped back through the
// byte-to-unicode map; code points outside the map (and invalid UTF-8) are kept as they are.
std::string decode_token_text(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    std::size_t len = decode_utf8(text, i, cp);
    if (len == 0) {
      out += text[i++];
      continue;
    }
    if (cp < kByteCharsEnd && kCharBytes[cp] >= 0) {
      out += static_cast<char>(kCharBytes[cp]);
    } else {
      out += text.substr(i, len);
    }
    i += len;
  }
  return out;
}

// Hugging Face's ByteLevel decoder: the bytes of a token (added tokens too) whose every code
// point is in the byte-to-unicode map, else its text as it is.
std::string decode_token_text_whole(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const std::size_t len = decode_utf8(text, i, cp);
    if (len == 0 || cp >= kByteCharsEnd || kCharBytes[cp] < 0) return std::string(text);
    out += static_cast<char>(kCharBytes[cp]);
    i += len;
  }
  return out;
}

bool is_special_type(int type) {
  return type == static_cast<int>(GgmlTokenType::kControl) ||
         type == static_cast<int>(GgmlTokenType::kUserDefined);
}

// A candidate merge of the symbol at `left` with its right neighbour.
struct Bigram {
  int rank;
  int left;
  int left_id;
  int right_id;
  int merged_id;
};
struct BigramAfter {
  // Lowest rank first, then leftmost (std::priority_queue pops the greatest).
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  }
};

struct Symbol {
  int id;    // token id; -1 for a byte without a token (dropped from the output)
  int prev;  // index of the left neighbour, -1 at the start
  int next;  // index of the right neighbour, -1 at the end
};

}  // namespace

bool is_end_of_generation_text(std::string_view text) {
  return text == "<|endoftext|>" || text == "<|im_end|>" || text == "<|eot_id|>" ||
         text == "<|end_of_text|>" || text == "<|end|>" || text == "</s>" ||
         text == "<end_of_turn>";
}

// A value for an error message: quoted, control bytes escaped, long values cut.
std::string quoted_value(std::string_view s) {
  constexpr std::size_t kMax = 48;
  std::size_t cut = std::min(s.size(), kMax);
  while (cut < s.size() && cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  std::string out = "\"";
  for (std::size_t i = 0; i < cut; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      constexpr char kHex[] = "0123456789abcdef";
      out += {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
    } else {
      out += static_cast<char>(c);
    }
  }
  out += cut < s.size() ? "\"..." : "\"";
  return out;
}

BpeTokenizer::BpeTokenizer(BpeVocab vocab)
    : path_(std::move(vocab.path)),
      tokens_(std::move(vocab.tokens)),
      bos_id_(vocab.bos_id),
      eos_id_(vocab.eos_id),
      hf_rules_(vocab.hf_rules),
      nfc_(vocab.nfc),
      ignore_merges_(vocab.ignore_merges),
      fuse_unk_(vocab.fuse_unk),
      adds_bos_(vocab.adds_bos) {
  const int n = vocab_size();
  if (n == 0) fail_expected(path_ + ": " + vocab.tokens_field, "at least one token", "none");
  std::vector<int>& types = vocab.token_types;
  fill_and_check_token_types(types);
  const std::unordered_map<std::string_view, int> ids = index_token_texts(vocab.tokens_field);
  set_special_ids(vocab);
  set_pre_tokenizer(vocab);
  build_merges(vocab, ids);
  index_bytes_and_whole_tokens(ids);
  build_decoded_and_added(vocab, types);
}

// An empty token_types means all normal; else one known ggml type per token.
void BpeTokenizer::fill_and_check_token_types(std::vector<int>& types) const {
  const std::string n_text = std::to_string(vocab_size());
  if (types.empty()) types.assign(tokens_.size(), static_cast<int>(GgmlTokenType::kNormal));
  if (types.size() != tokens_.size()) {
    fail_expected(path_ + ": tokenizer.ggml.token_type", n_text + " entries (one per token)",
                  std::to_string(types.size()));
  }
  for (std::size_t i = 0; i < types.size(); ++i) {
    if (types[i] < 0 || types[i] > static_cast<int>(GgmlTokenType::kByte)) {
      fail_expected(path_ + ": tokenizer.ggml.token_type[" + std::to_string(i) + "]",
                    "a ggml token type in [0, 6]", std::to_string(types[i]));
    }
  }
}

// Token text -> id (views into tokens_); no text twice.
std::unordered_map<std::string_view, int> BpeTokenizer::index_token_texts(
    const std::string& tokens_field) const {
  const int n = vocab_size();
  std::unordered_map<std::string_view, int> ids;
  ids.reserve(tokens_.size());
  for (int i = 0; i < n; ++i) {
    auto [it, fresh] = ids.emplace(tokens_[static_cast<std::size_t>(i)], i);
    if (!fresh) {
      fail_expected(path_ + ": " + tokens_field + "[" + std::to_string(i) + "]",
                    "a token text not used before",
                    quoted_value(it->first) + ", the text of token " + std::to_string(it->second));
    }
  }
  return ids;
}

// BOS, EOS and unk ids in range (or -1), and the stop ids.
void BpeTokenizer::set_special_ids(const BpeVocab& vocab) {
  const int n = vocab_size();
  const std::string n_text = std::to_string(n);
  auto check_vocab_id = [&](int id, const std::string& field) {
    if (id < -1 || id >= n) {
      fail_expected(path_ + ": " + field, "-1 (none) or a token id in [0, " + n_text + ")",
                    std::to_string(id));
    }
  };
  check_vocab_id(vocab.bos_id, "tokenizer.ggml.bos_token_id");
  check_vocab_id(vocab.eos_id, "tokenizer.ggml.eos_token_id");
  check_vocab_id(vocab.unk_id, "tokenizer.ggml.unknown_token_id");
  if (vocab.unk_bytes) unk_id_ = vocab.unk_id;
  if (eos_id_ >= 0) stop_ids_.push_back(eos_id_);
  for (std::size_t i = 0; i < vocab.extra_stop_ids.size(); ++i) {
    int id = vocab.extra_stop_ids[i];
    if (id < 0 || id >= n) {
      fail_expected(path_ + ": stop token ids[" + std::to_string(i) + "]",
                    "a token id in [0, " + n_text + ")", std::to_string(id));
    }
    stop_ids_.push_back(id);
  }
}

// The pre-tokenizer's steps: given, or named by tokenizer.ggml.pre.
void BpeTokenizer::set_pre_tokenizer(BpeVocab& vocab) {
  if (vocab.pre_splits) {
    pre_ = std::move(*vocab.pre_splits);
  } else if (vocab.pre == "smollm" || vocab.pre == "starcoder") {
    pre_ = {PreSplit::kDigits, PreSplit::kGpt2};
  } else if (vocab.pre == "gpt2") {
    pre_ = {PreSplit::kGpt2};
  } else {
    fail_expected(path_ + ": tokenizer.ggml.pre",
                  "a supported pre-tokenizer (smollm, starcoder, gpt2)", quoted_value(vocab.pre));
  }
}

// The ranked merges: each "left right" of two tokens whose concatenation is a token.
void BpeTokenizer::build_merges(const BpeVocab& vocab,
                                const std::unordered_map<std::string_view, int>& ids) {
  merges_.reserve(vocab.merges.size());
  std::string merged;
  for (std::size_t r = 0; r < vocab.merges.size(); ++r) {
    const std::string& m = vocab.merges[r];
    const std::string where = path_ + ": " + vocab.merges_field + "[" + std::to_string(r) + "]";
    std::size_t space = m.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == m.size() ||
        m.find(' ', space + 1) != std::string::npos) {
      fail_expected(where, "\"left right\" (two pieces and one space)", quoted_value(m));
    }
    std::string_view left = std::string_view(m).substr(0, space);
    std::string_view right = std::string_view(m).substr(space + 1);
    auto l = ids.find(left);
    auto rt = ids.find(right);
    if (l == ids.end() || rt == ids.end()) {
      fail_expected(where, "a merge of two tokens",
                    quoted_value(m) + " (" + quoted_value(l == ids.end() ? left : right) +
                        " is not a token)");
    }
    merged.assign(left);
    merged += right;
    auto mid = ids.find(merged);
    if (mid == ids.end()) {
      fail_expected(where, "a merge whose result is a token",
                    quoted_value(m) + " (" + quoted_value(merged) + " is not a token)");
    }
    std::uint64_t key =
        static_cast<std::uint64_t>(l->second) << 32 | static_cast<std::uint32_t>(rt->second);
    // A repeated merge keeps its first (best) rank in llama.cpp, its last in Hugging Face.
    if (hf_rules_) {
      merges_.insert_or_assign(key, MergeResult{static_cast<int>(r), mid->second});
    } else {
      merges_.try_emplace(key, MergeResult{static_cast<int>(r), mid->second});
    }
  }
}

// byte_ids_, and whole_ids_ under ignore_merges.
void BpeTokenizer::index_bytes_and_whole_tokens(
    const std::unordered_map<std::string_view, int>& ids) {
  // A byte without a token (SmolLM2 has none for 21 bytes: some controls, and lead bytes that
  // valid UTF-8 never or almost never uses) is dropped by encode(), as llama.cpp does; unk_id is
  // not used for it (SmolLM2's unk is <|endoftext|>, which would end the document) unless a
  // tokenizer.json asks for it (unk_bytes).
  std::string one;
  for (int b = 0; b < 256; ++b) {
    one.clear();
    append_utf8(one, kByteChars[static_cast<std::size_t>(b)]);
    auto it = ids.find(one);
    byte_ids_[static_cast<std::size_t>(b)] = it == ids.end() ? -1 : it->second;
  }

  if (ignore_merges_) {
    whole_ids_.reserve(ids.size());
    for (const auto& [text, id] : ids) whole_ids_.emplace(text, id);
  }
}

// Each token's decoded bytes, and the added tokens (normalized or not) to cut text at.
void BpeTokenizer::build_decoded_and_added(const BpeVocab& vocab, const std::vector<int>& types) {
  const int n = vocab_size();
  std::vector<bool> normalized(tokens_.size(), false);  // [vocab] in vocab.normalized_added
  for (std::size_t i = 0; i < vocab.normalized_added.size(); ++i) {
    const int id = vocab.normalized_added[i];
    if (id < 0 || id >= n || !is_special_type(types[static_cast<std::size_t>(id)])) {
      fail_expected(path_ + ": normalized added token ids[" + std::to_string(i) + "]",
                    "the id of a control or user-defined token", std::to_string(id));
    }
    normalized[static_cast<std::size_t>(id)] = true;
  }
  std::vector<int> added, added_normalized;
  decoded_.reserve(tokens_.size());
  for (int i = 0; i < n; ++i) {
    const std::string& t = tokens_[static_cast<std::size_t>(i)];
    int type = types[static_cast<std::size_t>(i)];
    bool verbatim = is_special_type(type) || type == static_cast<int>(GgmlTokenType::kUnknown);
    decoded_.push_back(hf_rules_  ? decode_token_text_whole(t)
                       : verbatim ? t
                                  : decode_token_text(t));
    if (is_special_type(type) && !t.empty()) {
      (normalized[static_cast<std::size_t>(i)] ? added_normalized : added).push_back(i);
    }
  }
  index_added(added_, std::move(added));
  index_added(normalized_added_, std::move(added_normalized));
}

void BpeTokenizer::index_added(AddedTokens& set, std::vector<int> ids) const {
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) {
    return tokens_[static_cast<std::size_t>(a)].size() >
           tokens_[static_cast<std::size_t>(b)].size();
  });
  for (int id : ids) {
    const auto first = static_cast<unsigned char>(tokens_[static_cast<std::size_t>(id)][0]);
    set.by_first_byte[first].push_back(id);
  }
  set.ids = std::move(ids);
}

bool BpeTokenizer::is_stop(int token) const {
  return std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end();
}

void BpeTokenizer::check_id(int token) const {
  if (token < 0 || token >= vocab_size()) {
    fail_expected(path_, "a token id in [0, " + std::to_string(vocab_size()) + ")",
                  std::to_string(token));
  }
}

const std::string& BpeTokenizer::piece(int token) const {
  check_id(token);
  return tokens_[static_cast<std::size_t>(token)];
}

std::string BpeTokenizer::decode(int /*prev_token*/, int token) const {
  check_id(token);
  return decoded_[static_cast<std::size_t>(token)];
}

std::string BpeTokenizer::decode_all(const std::vector<int>& tokens) const {
  std::string out;
  for (int t : tokens) {
    check_id(t);
    out += decoded_[static_cast<std::size_t>(t)];
  }
  return out;
}

std::vector<BpeTokenizer::Fragment> BpeTokenizer::split_added(std::string_view text,
                                                              const AddedTokens& set) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  if (hf_rules_) {
    // Leftmost-longest: at each position in turn, the longest added token that starts there.
    std::size_t raw_begin = 0;
    for (std::size_t pos = 0; pos < text.size();) {
      int hit = -1;
      for (int id : set.by_first_byte[static_cast<unsigned char>(text[pos])]) {
        if (text.substr(pos).starts_with(tokens_[static_cast<std::size_t>(id)])) {
          hit = id;
          break;
        }
      }
      if (hit < 0) {
        ++pos;
        continue;
      }
      if (pos > raw_begin) fragments.push_back({raw_begin, pos, -1});
      const std::size_t end = pos + tokens_[static_cast<std::size_t>(hit)].size();
      fragments.push_back({pos, end, hit});
      raw_begin = pos = end;
    }
    if (raw_begin < text.size()) fragments.push_back({raw_begin, text.size(), -1});
    return fragments;
  }

  // Longest first (llama.cpp): each added token, longest first, is cut out of the raw fragments
  // left by the longer ones.
  fragments.push_back({0, text.size(), -1});
  std::vector<Fragment> next;
  for (int special : set.ids) {
    const std::string& s = tokens_[static_cast<std::size_t>(special)];
    if (text.find(s) == std::string_view::npos) continue;
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      const std::string_view upto_end = text.substr(0, f.end);  // a hit must end inside f
      std::size_t pos = f.begin;
      for (std::size_t hit; (hit = upto_end.find(s, pos)) != std::string_view::npos;
           pos = hit + s.size()) {
        if (hit > pos) next.push_back({pos, hit, -1});
        next.push_back({hit, hit + s.size(), special});
      }
      if (pos < f.end) next.push_back({pos, f.end, -1});
    }
    fragments.swap(next);
  }
  return fragments;
}

std::vector<int> BpeTokenizer::encode(std::string_view text, bool bos, bool eos) const {
  std::vector<int> out;
  out.reserve(text.size() / 3 + 2);
  if (bos && bos_id_ >= 0) out.push_back(bos_id_);

  // Added tokens first; with Hugging Face's rules, the text between them is normalized and cut at
  // the added tokens that match normalized text.
  std::string normalized;
  for (const Fragment& f : split_added(text, added_)) {
    if (f.id >= 0) {
      out.push_back(f.id);
      continue;
    }
    std::string_view raw = text.substr(f.begin, f.end - f.begin);
    if (!hf_rules_) {
      encode_text(raw, out);
      continue;
    }
    if (nfc_) {
      normalized = nfc(raw);
      raw = normalized;
    }
    for (const Fragment& g : split_added(raw, normalized_added_)) {
      if (g.id >= 0) {
        out.push_back(g.id);
      } else {
        encode_text(raw.substr(g.begin, g.end - g.begin), out);
      }
    }
  }
  if (eos && eos_id_ >= 0) out.push_back(eos_id_);
  return out;
}

void BpeTokenizer::encode_text(std::string_view text, std::vector<int>& out) const {
  pre_tokenize(text, pre_, [&](std::string_view word) { encode_word(word, out); });
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int>& out) const {
  if (word.empty()) return;
  if (word.size() == 1) {
    int id = byte_ids_[static_cast<unsigned char>(word[0])];
    if (id < 0) id = unk_id_;
    if (id >= 0) out.push_back(id);
    return;
  }
  if (ignore_merges_) {
    // A pre-token that is a token as a whole is that token, whatever the merges would make.
    std::string text;
    for (unsigned char b : word) append_utf8(text, kByteChars[b]);
    if (auto it = whole_ids_.find(text); it != whole_ids_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // One symbol per byte to start with. A byte without a token becomes unk_id_ with unk_bytes
  // (a run of them one unk_id_ with fuse_unk); else it is left out: it stays as a symbol that
  // merges with nothing (llama.cpp), or is dropped so that its neighbours may merge (Hugging
  // Face).
  std::vector<Symbol> symbols;  // [symbols of word]
  symbols.reserve(word.size());
  bool after_unknown = false;  // the byte before was one without a token
  for (unsigned char b : word) {
    int id = byte_ids_[b];
    const bool unknown = id < 0;
    if (unknown && unk_id_ >= 0) {
      if (fuse_unk_ && after_unknown) continue;
      id = unk_id_;
    }
    after_unknown = unknown;
    if (id < 0 && hf_rules_) continue;
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({id, index - 1, -1});
    if (index > 0) symbols[static_cast<std::size_t>(index - 1)].next = index;
  }
  if (symbols.empty()) return;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramAfter> queue;
  auto try_pair = [&](int left) {
    if (left < 0) return;
    const Symbol& l = symbols[static_cast<std::size_t>(left)];
    if (l.next < 0 || l.id < 0) return;
    const Symbol& r = symbols[static_cast<std::size_t>(l.next)];
    if (r.id < 0) return;
    auto it =
        merges_.find(static_cast<std::uint64_t>(l.id) << 32 | static_cast<std::uint32_t>(r.id));
    if (it != merges_.end()) queue.push({it->second.rank, left, l.id, r.id, it->second.id});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) try_pair(i);

  while (!queue.empty()) {
    const Bigram top = queue.top();
    queue.pop();
    Symbol& l = symbols[static_cast<std::size_t>(top.left)];
    // Stale when either side has merged since (a merge always changes the left symbol's id,
    // and a symbol only disappears into its left neighbour).
    if (l.id != top.left_id || l.next < 0) continue;
    Symbol& r = symbols[static_cast<std::size_t>(l.next)];
    if (r.id != top.right_id) continue;
    l.id = top.merged_id;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<std::size_t>(r.next)].prev = top.left;
    r.id = -2;
    try_pair(l.prev);
    try_pair(top.left);
  }
  for (int i = 0; i >= 0; i = symbols[static_cast<std::size_t>(i)].next) {
    if (int id = symbols[static_cast<std::size_t>(i)].id; id >= 0) out.push_back(id);
  }
}

}  // namespace kvscope

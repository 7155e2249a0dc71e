// BpeTokenizer: vocabulary validation, special-token splitting, the GPT-2 pre-tokenizer (a
// hand-written scanner for its regex), rank-ordered byte-level BPE, and byte decoding.
#include "engine/model/bpe_tokenizer.h"

#include <algorithm>
#include <queue>

#include "engine/common/error.h"
#include "engine/model/unicode_class.h"

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

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Decodes the well-formed UTF-8 sequence at s[i] into cp and returns its length; returns 0 when
// s[i] does not start one (stray continuation byte, overlong form, surrogate, > U+10FFFF,
// truncated sequence).
std::size_t decode_utf8(std::string_view s, std::size_t i, char32_t& cp) {
  auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char b0 = byte(i);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  std::size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + len > s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  char32_t v = b0 & (0xFF >> (len + 1));
  for (std::size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    v = (v << 6) | (byte(i + k) & 0x3F);
  }
  cp = v;
  return len;
}

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

// A value for an error message: quoted, control bytes escaped, long values cut.
std::string quoted(std::string_view s) {
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

bool is_special_type(int type) {
  return type == static_cast<int>(GgmlTokenType::kControl) ||
         type == static_cast<int>(GgmlTokenType::kUserDefined);
}

// One code point of the text being pre-tokenized (an invalid UTF-8 byte counts as one, kOther).
struct CodePoint {
  char32_t cp;
  CharClass cls;
  std::size_t start;  // byte offset in the text
};

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

BpeTokenizer::BpeTokenizer(BpeVocab vocab)
    : path_(std::move(vocab.path)), tokens_(std::move(vocab.tokens)) {
  const int n = vocab_size();
  const std::string n_text = std::to_string(n);
  if (n == 0) fail_expected(path_ + ": tokenizer.ggml.tokens", "at least one token", "none");

  std::vector<int>& types = vocab.token_types;
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

  std::unordered_map<std::string_view, int> ids;  // token text -> id (views into tokens_)
  ids.reserve(tokens_.size());
  for (int i = 0; i < n; ++i) {
    auto [it, fresh] = ids.emplace(tokens_[static_cast<std::size_t>(i)], i);
    if (!fresh) {
      fail_expected(path_ + ": tokenizer.ggml.tokens[" + std::to_string(i) + "]",
                    "a token text not used before",
                    quoted(it->first) + ", the text of token " + std::to_string(it->second));
    }
  }

  auto check_vocab_id = [&](int id, const std::string& field) {
    if (id < -1 || id >= n) {
      fail_expected(path_ + ": " + field, "-1 (none) or a token id in [0, " + n_text + ")",
                    std::to_string(id));
    }
  };
  check_vocab_id(vocab.bos_id, "tokenizer.ggml.bos_token_id");
  check_vocab_id(vocab.eos_id, "tokenizer.ggml.eos_token_id");
  check_vocab_id(vocab.unk_id, "tokenizer.ggml.unknown_token_id");
  bos_id_ = vocab.bos_id;
  eos_id_ = vocab.eos_id;
  if (eos_id_ >= 0) stop_ids_.push_back(eos_id_);
  for (std::size_t i = 0; i < vocab.extra_stop_ids.size(); ++i) {
    int id = vocab.extra_stop_ids[i];
    if (id < 0 || id >= n) {
      fail_expected(path_ + ": stop token ids[" + std::to_string(i) + "]",
                    "a token id in [0, " + n_text + ")", std::to_string(id));
    }
    stop_ids_.push_back(id);
  }

  if (vocab.pre == "smollm" || vocab.pre == "starcoder") {
    pre_ = PreTokenizer::kDigitsThenGpt2;
  } else if (vocab.pre == "gpt2") {
    pre_ = PreTokenizer::kGpt2;
  } else {
    fail_expected(path_ + ": tokenizer.ggml.pre",
                  "a supported pre-tokenizer (smollm, starcoder, gpt2)", quoted(vocab.pre));
  }

  merges_.reserve(vocab.merges.size());
  std::string merged;
  for (std::size_t r = 0; r < vocab.merges.size(); ++r) {
    const std::string& m = vocab.merges[r];
    const std::string where = path_ + ": tokenizer.ggml.merges[" + std::to_string(r) + "]";
    std::size_t space = m.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == m.size() ||
        m.find(' ', space + 1) != std::string::npos) {
      fail_expected(where, "\"left right\" (two pieces and one space)", quoted(m));
    }
    std::string_view left = std::string_view(m).substr(0, space);
    std::string_view right = std::string_view(m).substr(space + 1);
    auto l = ids.find(left);
    auto rt = ids.find(right);
    if (l == ids.end() || rt == ids.end()) {
      fail_expected(where, "a merge of two tokens",
                    quoted(m) + " (" + quoted(l == ids.end() ? left : right) + " is not a token)");
    }
    merged.assign(left);
    merged += right;
    auto mid = ids.find(merged);
    if (mid == ids.end()) {
      fail_expected(where, "a merge whose result is a token",
                    quoted(m) + " (" + quoted(merged) + " is not a token)");
    }
    std::uint64_t key =
        static_cast<std::uint64_t>(l->second) << 32 | static_cast<std::uint32_t>(rt->second);
    // A repeated merge keeps its first (best) rank.
    merges_.try_emplace(key, MergeResult{static_cast<int>(r), mid->second});
  }

  // A byte without a token (SmolLM2 has none for 21 bytes: some controls, and lead bytes that
  // valid UTF-8 never or almost never uses) is dropped by encode(), as llama.cpp does; unk_id is
  // not used for it (SmolLM2's unk is <|endoftext|>, which would end the document).
  std::string one;
  for (int b = 0; b < 256; ++b) {
    one.clear();
    append_utf8(one, kByteChars[static_cast<std::size_t>(b)]);
    auto it = ids.find(one);
    byte_ids_[static_cast<std::size_t>(b)] = it == ids.end() ? -1 : it->second;
  }

  decoded_.reserve(tokens_.size());
  for (int i = 0; i < n; ++i) {
    const std::string& t = tokens_[static_cast<std::size_t>(i)];
    int type = types[static_cast<std::size_t>(i)];
    bool verbatim = is_special_type(type) || type == static_cast<int>(GgmlTokenType::kUnknown);
    decoded_.push_back(verbatim ? t : decode_token_text(t));
    if (is_special_type(type) && !t.empty()) special_ids_.push_back(i);
  }
  std::stable_sort(special_ids_.begin(), special_ids_.end(), [&](int a, int b) {
    return tokens_[static_cast<std::size_t>(a)].size() >
           tokens_[static_cast<std::size_t>(b)].size();
  });
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

std::vector<int> BpeTokenizer::encode(std::string_view text, bool bos, bool eos) const {
  std::vector<int> out;
  out.reserve(text.size() / 3 + 2);
  if (bos && bos_id_ >= 0) out.push_back(bos_id_);

  // The text as fragments: special tokens (id >= 0) and raw text [begin, end) between them. Each
  // special token, longest first, is cut out of the raw fragments left by the longer ones.
  struct Fragment {
    std::size_t begin, end;
    int id;  // -1 for raw text
  };
  std::vector<Fragment> fragments;
  if (!text.empty()) fragments.push_back({0, text.size(), -1});
  std::vector<Fragment> next;
  for (int special : special_ids_) {
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

  for (const Fragment& f : fragments) {
    if (f.id >= 0) {
      out.push_back(f.id);
    } else {
      encode_text(text.substr(f.begin, f.end - f.begin), out);
    }
  }
  if (eos && eos_id_ >= 0) out.push_back(eos_id_);
  return out;
}

void BpeTokenizer::encode_text(std::string_view text, std::vector<int>& out) const {
  std::vector<CodePoint> cps;  // [code points of text]
  cps.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    std::size_t len = decode_utf8(text, i, cp);
    if (len == 0) {
      // An invalid byte: a code point of its own, of class other (0x110000 + byte, never valid).
      cps.push_back(
          {char32_t{0x110000} + static_cast<unsigned char>(text[i]), CharClass::kOther, i});
      len = 1;
    } else {
      cps.push_back({cp, char_class(cp), i});
    }
    i += len;
  }
  auto byte_at = [&](std::size_t k) { return k < cps.size() ? cps[k].start : text.size(); };
  auto emit = [&](std::size_t from, std::size_t to) {
    encode_word(text.substr(byte_at(from), byte_at(to) - byte_at(from)), out);
  };

  // The GPT-2 pattern on code points [b, e), which it sees as the whole text (so nothing after e
  // is looked at, as when llama.cpp runs it on each piece of a previous split):
  //   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  auto gpt2 = [&](std::size_t b, std::size_t e) {
    std::size_t pos = b;
    while (pos < e) {
      const char32_t c = cps[pos].cp;
      if (c == '\'' && pos + 1 < e) {
        const char32_t c1 = cps[pos + 1].cp;
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
          emit(pos, pos + 2);
          pos += 2;
          continue;
        }
        const char32_t c2 = pos + 2 < e ? cps[pos + 2].cp : 0;
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
          emit(pos, pos + 3);
          pos += 3;
          continue;
        }
      }
      // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space, then a run of one class.
      const std::size_t first = c == ' ' && pos + 1 < e ? pos + 1 : pos;
      const CharClass cls = cps[first].cls;
      std::size_t end = first;
      if (cls != CharClass::kWhitespace) {
        while (end < e && cps[end].cls == cls) ++end;
      } else {
        // `\s+(?!\S)` then `\s+`: a whitespace run followed by a non-space leaves its last
        // character to the next match (a single one cannot: `\s+` takes it).
        while (end < e && cps[end].cls == CharClass::kWhitespace) ++end;
        if (end - pos > 1 && end < e) --end;
      }
      emit(pos, end);
      pos = end;
    }
  };

  if (pre_ == PreTokenizer::kGpt2) {
    gpt2(0, cps.size());
    return;
  }
  // smollm / starcoder: every \p{N} code point is a piece of its own, the GPT-2 pattern splits
  // the text between them.
  std::size_t piece_begin = 0;
  for (std::size_t k = 0; k < cps.size(); ++k) {
    if (cps[k].cls != CharClass::kNumber) continue;
    gpt2(piece_begin, k);
    emit(k, k + 1);
    piece_begin = k + 1;
  }
  gpt2(piece_begin, cps.size());
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int>& out) const {
  if (word.empty()) return;
  if (word.size() == 1) {
    if (int id = byte_ids_[static_cast<unsigned char>(word[0])]; id >= 0) out.push_back(id);
    return;
  }
  const int n = static_cast<int>(word.size());
  std::vector<Symbol> symbols(word.size());  // [bytes of word] one per byte to start with
  for (int i = 0; i < n; ++i) {
    symbols[static_cast<std::size_t>(i)] = {
        byte_ids_[static_cast<unsigned char>(word[static_cast<std::size_t>(i)])], i - 1,
        i + 1 < n ? i + 1 : -1};
  }
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
  for (int i = 0; i + 1 < n; ++i) try_pair(i);

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

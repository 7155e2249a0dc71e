// The pre-tokenizer scanners. Each reads code points [b, e) as the whole text (nothing after e is
// looked at, as when Hugging Face or llama.cpp runs a pattern on each piece of an earlier split)
// and reproduces the first-match-wins alternation of its regular expression.
#include "engine/model/pre_tokenizer.h"

#include <vector>

#include "engine/model/unicode_class.h"
#include "engine/model/utf8.h"

namespace kvscope {
namespace {

// One code point of the text (an invalid UTF-8 byte counts as one, of class kOther).
struct CodePoint {
  char32_t cp;
  CharClass cls;
  std::size_t start;  // byte offset in the text
};

class Splitter {
 public:
  Splitter(std::string_view text, std::span<const PreSplit> steps,
           const std::function<void(std::string_view)>& emit)
      : text_(text), steps_(steps), emit_(emit) {
    cps_.reserve(text.size());
    for (std::size_t i = 0; i < text.size();) {
      char32_t cp = 0;
      std::size_t len = decode_utf8(text, i, cp);
      if (len == 0) {
        // 0x110000 + byte: never a code point, so it matches no literal either.
        cps_.push_back(
            {char32_t{0x110000} + static_cast<unsigned char>(text[i]), CharClass::kOther, i});
        len = 1;
      } else {
        cps_.push_back({cp, char_class(cp), i});
      }
      i += len;
    }
  }

  void run() { split(0, 0, cps_.size()); }

 private:
  // Cuts [b, e) by step `step`, or emits it when every step has run.
  void split(std::size_t step, std::size_t b, std::size_t e) {
    if (b == e) return;
    if (step == steps_.size()) {
      const std::size_t from = cps_[b].start;
      const std::size_t to = e < cps_.size() ? cps_[e].start : text_.size();
      emit_(text_.substr(from, to - from));
      return;
    }
    switch (steps_[step]) {
      case PreSplit::kDigits:
        digits(step, b, e, /*runs=*/false);
        break;
      case PreSplit::kDigitRuns:
        digits(step, b, e, /*runs=*/true);
        break;
      case PreSplit::kGpt2:
        gpt2(step, b, e);
        break;
      case PreSplit::kLlama3:
        llama3(step, b, e, /*max_digits=*/3);
        break;
      case PreSplit::kQwen2:
        llama3(step, b, e, /*max_digits=*/1);
        break;
    }
  }

  CharClass cls(std::size_t k) const { return cps_[k].cls; }
  char32_t cp(std::size_t k) const { return cps_[k].cp; }
  bool is_newline(std::size_t k) const { return cp(k) == '\r' || cp(k) == '\n'; }

  // Digits: \p{N} code points (each, or each run) are pieces; the text between is split further.
  void digits(std::size_t step, std::size_t b, std::size_t e, bool runs) {
    std::size_t other_begin = b;
    for (std::size_t k = b; k < e;) {
      if (cls(k) != CharClass::kNumber) {
        ++k;
        continue;
      }
      std::size_t end = k + 1;
      if (runs) {
        while (end < e && cls(end) == CharClass::kNumber) ++end;
      }
      split(step + 1, other_begin, k);
      split(step + 1, k, end);
      other_begin = k = end;
    }
    split(step + 1, other_begin, e);
  }

  // The length of a contraction ('s 't 're 've 'm 'll 'd) at k, 0 when none; `any_case` for
  // (?i:...), which folds ASCII case and U+017F LONG S (to s), as Oniguruma does.
  std::size_t contraction(std::size_t k, std::size_t e, bool any_case) const {
    if (cp(k) != '\'' || k + 1 >= e) return 0;
    auto lower = [&](std::size_t i) -> char32_t {
      const char32_t c = cp(i);
      if (!any_case) return c;
      if (c >= 'A' && c <= 'Z') return c - 'A' + 'a';
      return c == 0x17F ? 's' : c;
    };
    const char32_t c1 = lower(k + 1);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (k + 2 >= e) return 0;
    const char32_t c2 = lower(k + 2);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
  }

  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  void gpt2(std::size_t step, std::size_t b, std::size_t e) {
    std::size_t pos = b;
    while (pos < e) {
      if (std::size_t n = contraction(pos, e, /*any_case=*/false); n > 0) {
        split(step + 1, pos, pos + n);
        pos += n;
        continue;
      }
      // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space, then a run of one class.
      const std::size_t first = cp(pos) == ' ' && pos + 1 < e ? pos + 1 : pos;
      const CharClass c = cls(first);
      std::size_t end = first;
      if (c != CharClass::kWhitespace) {
        while (end < e && cls(end) == c) ++end;
      } else {
        // `\s+(?!\S)` then `\s+`: a whitespace run followed by a non-space leaves its last
        // character to the next match (a single one cannot: `\s+` takes it).
        while (end < e && cls(end) == CharClass::kWhitespace) ++end;
        if (end - pos > 1 && end < e) --end;
      }
      split(step + 1, pos, end);
      pos = end;
    }
  }

  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
  //  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  void llama3(std::size_t step, std::size_t b, std::size_t e, std::size_t max_digits) {
    std::size_t pos = b;
    while (pos < e) {
      std::size_t end = pos;
      const CharClass c = cls(pos);
      if (std::size_t n = contraction(pos, e, /*any_case=*/true); n > 0) {
        end = pos + n;
      } else if (c == CharClass::kLetter || (c != CharClass::kNumber && !is_newline(pos) &&
                                             pos + 1 < e && cls(pos + 1) == CharClass::kLetter)) {
        // [^\r\n\p{L}\p{N}]?\p{L}+: one optional code point of another kind, then letters.
        end = pos + 1;
        while (end < e && cls(end) == CharClass::kLetter) ++end;
      } else if (c == CharClass::kNumber) {
        while (end < e && end - pos < max_digits && cls(end) == CharClass::kNumber) ++end;
      } else if (c == CharClass::kOther ||
                 (cp(pos) == ' ' && pos + 1 < e && cls(pos + 1) == CharClass::kOther)) {
        // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
        end = c == CharClass::kOther ? pos : pos + 1;
        while (end < e && cls(end) == CharClass::kOther) ++end;
        while (end < e && is_newline(end)) ++end;
      } else {
        // Whitespace. `\s*[\r\n]+`: up to the run's last newline, when it has one; else
        // `\s+(?!\S)` (the run less its last code point when a non-space follows), else `\s+`.
        std::size_t after_newline = pos;
        while (end < e && cls(end) == CharClass::kWhitespace) {
          if (is_newline(end)) after_newline = end + 1;
          ++end;
        }
        if (after_newline > pos) {
          end = after_newline;
        } else if (end - pos > 1 && end < e) {
          --end;
        }
      }
      split(step + 1, pos, end);
      pos = end;
    }
  }

  std::string_view text_;
  std::span<const PreSplit> steps_;
  const std::function<void(std::string_view)>& emit_;
  std::vector<CodePoint> cps_;  // [code points of text]
};

}  // namespace

void pre_tokenize(std::string_view text, std::span<const PreSplit> steps,
                  const std::function<void(std::string_view)>& emit) {
  if (text.empty()) return;
  Splitter(text, steps, emit).run();
}

}  // namespace kvscope

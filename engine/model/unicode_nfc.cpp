// NFC as UAX #15 defines it: decompose every code point fully (canonical mappings, Hangul
// syllables by arithmetic), put each run of non-starters in canonical order, then compose each
// unblocked mark with the starter before it.
#include "engine/model/unicode_nfc.h"

#include <algorithm>
#include <vector>

#include "engine/model/utf8.h"

namespace kvscope {
namespace {

// Hangul syllables: S = kSBase + (L * kVCount + V) * kTCount + T (Unicode 15, section 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// A byte that is not valid UTF-8 is held as kInvalid + byte: class 0, composes with nothing.
constexpr char32_t kInvalid = 0x110000;

struct Mark {
  char32_t cp;
  std::uint8_t ccc;  // canonical combining class
};

void decompose(char32_t cp, std::vector<Mark>& out, int depth) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back({kLBase + s / kNCount, 0});
    out.push_back({kVBase + (s % kNCount) / kTCount, 0});
    if (s % kTCount != 0) out.push_back({kTBase + s % kTCount, 0});
    return;
  }
  char32_t parts[2] = {0, 0};
  // Mappings nest at most three deep; the bound only guards against a bad table.
  const int n = depth < 8 ? canonical_decomposition(cp, parts) : 0;
  if (n == 0) {
    out.push_back({cp, canonical_combining_class(cp)});
    return;
  }
  for (int k = 0; k < n; ++k) decompose(parts[k], out, depth + 1);
}

char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;  // L + V
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);  // LV + T
  }
  return a < kInvalid && b < kInvalid ? primary_composite(a, b) : 0;
}

}  // namespace

std::string nfc(std::string_view text) {
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    return std::string(text);  // ASCII is its own NFC
  }
  // 1. Full canonical decomposition.
  std::vector<Mark> buf;  // [code points after decomposition]
  buf.reserve(text.size() + text.size() / 2);
  for (std::size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const std::size_t len = decode_utf8(text, i, cp);
    if (len == 0) {
      buf.push_back({kInvalid + static_cast<unsigned char>(text[i]), 0});
      ++i;
      continue;
    }
    decompose(cp, buf, 0);
    i += len;
  }

  // 2. Canonical order: each run of non-starters sorted by class, stably.
  for (std::size_t i = 0; i < buf.size();) {
    if (buf[i].ccc == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < buf.size() && buf[j].ccc != 0) ++j;
    std::stable_sort(buf.begin() + static_cast<std::ptrdiff_t>(i),
                     buf.begin() + static_cast<std::ptrdiff_t>(j),
                     [](const Mark& a, const Mark& b) { return a.ccc < b.ccc; });
    i = j;
  }

  // 3. Canonical composition: a code point joins the last starter unless a code point of the
  // same or a higher class, or of class 0, stands between them. `last_ccc` is the class of the
  // last one kept (0: the starter itself).
  std::size_t kept = 0;
  std::size_t starter = 0;
  bool have_starter = false;
  std::uint8_t last_ccc = 0;
  for (const Mark m : buf) {
    if (have_starter && (last_ccc == 0 || last_ccc < m.ccc)) {
      if (char32_t c = compose(buf[starter].cp, m.cp); c != 0) {
        buf[starter].cp = c;
        continue;
      }
    }
    if (m.ccc == 0) {
      starter = kept;
      have_starter = true;
    }
    last_ccc = m.ccc;
    buf[kept++] = m;
  }
  buf.resize(kept);

  std::string out;
  out.reserve(text.size());
  for (const Mark& m : buf) {
    if (m.cp >= kInvalid) {
      out += static_cast<char>(m.cp - kInvalid);
    } else {
      append_utf8(out, m.cp);
    }
  }
  return out;
}

}  // namespace kvscope

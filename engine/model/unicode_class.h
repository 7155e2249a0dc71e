// Unicode character classes the GPT-2-style pre-tokenizers split on: letters \p{L}, numbers
// \p{N}, whitespace \s (Unicode's White_Space property), everything else.
#pragma once

#include <cstdint>

namespace kvscope {

enum class CharClass : std::uint8_t { kOther, kLetter, kNumber, kWhitespace };

// The class of a Unicode scalar value; surrogates, unassigned and out-of-range values are kOther.
CharClass char_class(char32_t cp);

}  // namespace kvscope

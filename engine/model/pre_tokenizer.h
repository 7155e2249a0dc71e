// Pre-tokenizers of byte-level BPE: how text is cut into pieces before BPE merges the bytes of
// each piece (no merge crosses a cut). Hand-written scanners for the regular expressions that
// GPT-2, Llama-3 and Qwen2 split with, and for Hugging Face's Digits step.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

namespace kvscope {

enum class PreSplit : std::uint8_t {
  // Every \p{N} code point a piece of its own (Digits with individual_digits; llama.cpp "smollm").
  kDigits,
  // Every run of \p{N} code points a piece of its own (Digits without individual_digits).
  kDigitRuns,
  // GPT-2's pattern: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // Llama-3's: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // Qwen2's: Llama-3's with \p{N} (one code point) in place of \p{N}{1,3}.
  kQwen2,
};

// Cuts `text` by each step in turn (a step sees each piece of the step before as a whole text)
// and calls emit(piece) for every final piece, in order; the pieces cover the text exactly. A
// byte that is not valid UTF-8 counts as one code point of none of the classes \p{L}, \p{N}, \s.
void pre_tokenize(std::string_view text, std::span<const PreSplit> steps,
                  const std::function<void(std::string_view)>& emit);

}  // namespace kvscope

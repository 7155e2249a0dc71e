// Hugging Face tokenizer.json files (what vLLM and SGLang tokenize prompts with) read as a kvscope
// Tokenizer: byte-level BPE as GPT-2, SmolLM2, Qwen2/2.5 and Llama-3 ship it, tokenizing as the
// `tokenizers` library does; every other kind is refused with a one-line kvscope::Error naming
// the file, the JSON field, the value and what was expected.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "engine/model/tokenizer.h"

namespace kvscope {

// Larger files are refused before parsing (Llama-3's is 9 MB, Qwen2's 7 MB).
inline constexpr std::size_t kMaxTokenizerJsonBytes = std::size_t{64} << 20;

// What is read (anything else there is refused; "truncation" and "padding" are ignored, as
// transformers sets both per call):
//   model            type "BPE"; vocab {text: id} with ids 0..n-1; merges all "left right" strings
//                    or all ["left", "right"] pairs; unk_token null or a token (then a byte
//                    without a token encodes as it, runs of them as one with fuse_unk);
//                    ignore_merges; dropout null or 0; byte_fallback false; no subword prefix or
//                    suffix.
//   normalizer       null or NFC (alone or in a Sequence).
//   pre_tokenizer    ByteLevel (add_prefix_space false; use_regex: GPT-2's pattern), alone or last
//                    in a Sequence after Digits and Split steps; a Split's pattern must be GPT-2's,
//                    Llama-3's or Qwen2's regex, its behavior "Isolated", not inverted.
//   decoder          null or ByteLevel (alone or in a Sequence).
//   post_processor   null, ByteLevel, or TemplateProcessing whose "single" is [a special token]
//                    $A [a special token]: the first is BOS (adds_bos()), the last EOS.
//   added_tokens     split out of the text before anything else, leftmost-longest, as Hugging
//                    Face does (normalized ones after normalization); special ones decode to
//                    their text and stop generation when they read as an end (<|im_end|>, ...).
//                    Ids: the vocabulary's for its texts, then the next ones in order; lstrip,
//                    rstrip and single_word must be false.
// Throws kvscope::Error for a missing, unreadable, empty or too large file, invalid JSON, and
// every refusal above.
std::shared_ptr<const Tokenizer> load_tokenizer_json(const std::string& path);

// The same from the file's text; `path` names it in errors.
std::shared_ptr<const Tokenizer> parse_tokenizer_json(std::string_view text,
                                                      const std::string& path);

// Whether a tokenizer path names a tokenizer.json (its file name ends in ".json").
bool is_tokenizer_json_path(std::string_view path);

}  // namespace kvscope

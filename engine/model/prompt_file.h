// The prompt a prefix lookup asks about (`kvscope attach --lookup`, `kvscope lookup`, the Live
// attach panel's lookup box): token ids, or text and the engine's tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {

struct PromptSource {
  std::string path;       // the prompt file ("" when text is given)
  std::string text;       // the prompt itself
  std::string tokenizer;  // a tokenizer.json or a GGUF file, for text
  std::string model;      // or a model whose tokenizer to use (a name or a path)
  bool bos = false;       // put the tokenizer's BOS first even when its convention does not
};

// Where read_prompt_tokens' errors about a prompt given as text (no file) are located, in the
// engine's words; a caller that knows which flag carried it puts that in its place
// (setting_source.h).
inline constexpr std::string_view kPromptText = "prompt text";

// The prompt's token ids. A file holding a JSON array of ids, or an object with "tokens" (what
// vLLM's and SGLang's /tokenize return), is taken as ids; anything else must be UTF-8 text, which
// is tokenized as the engines do (with BOS when the tokenizer's convention adds one: a
// tokenizer.json's post-processor template, llama2.c and SentencePiece models). Throws a one-line
// kvscope::Error naming the file: not UTF-8 and not ids, a negative or non-integer id, text without
// a tokenizer, an unreadable tokenizer.
std::vector<std::int64_t> read_prompt_tokens(const PromptSource& src);

}  // namespace kvscope

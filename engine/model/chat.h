// Chat prompts: ChatML (<|im_start|>role\n...<|im_end|>\n), the template of SmolLM2 and many other
// instruct models, with the default system line taken from the model's own template.
#pragma once

#include <string>

#include "engine/model/tokenizer.h"

namespace kvscope {

// The system line a ChatML template inserts when the conversation has none: the text between
// "<|im_start|>system\n" and the next "<|im_end|>" in `chat_template`; empty when there is none.
std::string default_system_line(const std::string& chat_template);

// One system and one user turn, then the assistant's turn opened for generation. Throws
// kvscope::Error when `tokenizer` does not hold <|im_start|> and <|im_end|> as single tokens (a
// model not trained on ChatML).
std::string render_chatml(const Tokenizer& tokenizer, const std::string& system,
                          const std::string& user);

}  // namespace kvscope

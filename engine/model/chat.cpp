// ChatML rendering.
#include "engine/model/chat.h"

#include "engine/common/error.h"

namespace kvscope {

std::string default_system_line(const std::string& chat_template) {
  const std::string open = "<|im_start|>system\n";
  const std::size_t at = chat_template.find(open);
  if (at == std::string::npos) return "";
  const std::size_t begin = at + open.size();
  const std::size_t end = chat_template.find("<|im_end|>", begin);
  return end == std::string::npos ? "" : chat_template.substr(begin, end - begin);
}

std::string render_chatml(const Tokenizer& tokenizer, const std::string& system,
                          const std::string& user) {
  for (const char* special : {"<|im_start|>", "<|im_end|>"}) {
    const std::vector<int> ids = tokenizer.encode(special, false, false);
    if (ids.size() != 1) {
      throw Error(tokenizer.path(), std::string("expected a ChatML model for chat (") + special +
                                        " one token), got a tokenizer that splits it into " +
                                        std::to_string(ids.size()) + " tokens");
    }
  }
  std::string out;
  if (!system.empty()) out += "<|im_start|>system\n" + system + "<|im_end|>\n";
  out += "<|im_start|>user\n" + user + "<|im_end|>\n";
  out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace kvscope

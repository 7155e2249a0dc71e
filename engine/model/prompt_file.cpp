// Reading the prompt of a prefix lookup.
#include "engine/model/prompt_file.h"

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "engine/model/locate.h"
#include "engine/model/tokenizer_json.h"

namespace kvscope {

namespace {

constexpr std::size_t kMaxPromptBytes = std::size_t{64} << 20;

bool valid_utf8(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80           ? 1
                    : (c >> 5) == 0x6  ? 2
                    : (c >> 4) == 0xE  ? 3
                    : (c >> 3) == 0x1E ? 4
                                       : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    if (c == 0) return false;  // a NUL byte: a binary file, not text
    i += n;
  }
  return true;
}

std::vector<std::int64_t> ids_from_json(const nlohmann::json& j, const std::string& where) {
  const nlohmann::json* arr = &j;
  std::string field = "";
  if (j.is_object()) {
    if (!j.contains("tokens")) {
      throw Error(where,
                  "expected a JSON array of token ids or an object with \"tokens\" (the "
                  "engine's /tokenize answer), got an object without \"tokens\"");
    }
    arr = &j["tokens"];
    field = "tokens";
  }
  if (!arr->is_array()) {
    throw Error(where, (field.empty() ? std::string() : field + ": ") +
                           "expected an array of token ids, got " + arr->type_name());
  }
  std::vector<std::int64_t> ids;
  ids.reserve(arr->size());
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const nlohmann::json& v = (*arr)[i];
    if (!v.is_number_integer() ||
        (v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() < 0)) {
      throw Error(where, (field.empty() ? std::string() : field) + "[" + std::to_string(i) +
                             "]: expected a token id (an integer >= 0), got " + v.dump());
    }
    ids.push_back(v.get<std::int64_t>());
  }
  return ids;
}

}  // namespace

std::vector<std::int64_t> read_prompt_tokens(const PromptSource& src) {
  std::string text = src.text;
  const std::string where = src.path.empty() ? std::string(kPromptText) : src.path;
  if (!src.path.empty()) {
    std::ifstream in(src.path, std::ios::binary);
    if (!in) throw Error(src.path, "cannot open the prompt file");
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (text.size() > kMaxPromptBytes) {
      throw Error(src.path, "expected a prompt of at most 64 MiB, got " +
                                std::to_string(text.size()) + " bytes");
    }
  }
  const std::size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (text[first] == '[' || text[first] == '{')) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded()) return ids_from_json(j, where);
    if (text[first] == '{')
      throw Error(where, "expected JSON (the engine's /tokenize answer), got invalid JSON");
  }
  if (!valid_utf8(text)) {
    throw Error(where, "expected UTF-8 text or a JSON array of token ids, got binary data");
  }
  if (src.tokenizer.empty() && src.model.empty()) {
    throw Error(where,
                "a text prompt needs the engine's tokenizer (a tokenizer.json or GGUF file, or a "
                "model to take it from); or give token ids (a JSON array, or what the engine's "
                "/tokenize returns)");
  }
  std::shared_ptr<const Tokenizer> tok;
  if (!src.tokenizer.empty()) {
    tok = is_tokenizer_json_path(src.tokenizer) ? load_tokenizer_json(src.tokenizer)
                                                : load_model(src.tokenizer, "").tokenizer;
  } else {
    tok = load_model(src.model, "").tokenizer;
  }
  if (!tok) throw Error(src.tokenizer.empty() ? src.model : src.tokenizer, "has no tokenizer");
  // As the engine tokenizes a prompt: with BOS when the tokenizer's convention adds one.
  const std::vector<int> ids = tok->encode(text, src.bos || tok->adds_bos(), /*eos=*/false);
  return {ids.begin(), ids.end()};
}

}  // namespace kvscope

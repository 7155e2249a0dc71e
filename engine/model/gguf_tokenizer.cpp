// The tokenizer a GGUF file carries in its tokenizer.ggml.* metadata: byte-level BPE for "gpt2"
// vocabularies, the llama2.c (SentencePiece-style) tokenizer for "llama" ones.
#include "engine/common/error.h"
#include "engine/model/bpe_tokenizer.h"
#include "engine/model/gguf_model.h"

namespace kvscope {
namespace {

int special_id(const GgufFile& f, const std::string& key, int vocab) {
  std::optional<std::uint64_t> id = f.get_uint(key);
  if (!id) return -1;
  if (*id >= static_cast<std::uint64_t>(vocab)) {
    fail_expected(f.path() + ": " + key, "a token id in [0, " + std::to_string(vocab) + ")",
                  std::to_string(*id));
  }
  return static_cast<int>(*id);
}

std::shared_ptr<const Tokenizer> load_bpe(const GgufFile& f, std::vector<std::string> tokens,
                                          int vocab) {
  BpeVocab v;
  v.path = f.path();
  v.tokens = std::move(tokens);
  for (std::int64_t t : f.get_int_array("tokenizer.ggml.token_type")) {
    v.token_types.push_back(static_cast<int>(t));
  }
  v.merges = f.get_string_array("tokenizer.ggml.merges");
  v.pre = f.get_string("tokenizer.ggml.pre").value_or("default");
  v.bos_id = special_id(f, "tokenizer.ggml.bos_token_id", vocab);
  v.eos_id = special_id(f, "tokenizer.ggml.eos_token_id", vocab);
  v.unk_id = special_id(f, "tokenizer.ggml.unknown_token_id", vocab);
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    if (int id = special_id(f, key, vocab); id >= 0) v.extra_stop_ids.push_back(id);
  }
  for (std::size_t i = 0; i < v.tokens.size() && i < v.token_types.size(); ++i) {
    if (v.token_types[i] == 3 && is_end_of_generation_text(v.tokens[i])) {
      v.extra_stop_ids.push_back(static_cast<int>(i));
    }
  }
  return std::make_shared<BpeTokenizer>(std::move(v));
}

std::shared_ptr<const Tokenizer> load_sentencepiece(const GgufFile& f,
                                                    std::vector<std::string> tokens, int vocab) {
  std::vector<float> scores;
  if (const GgufValue* s = f.find("tokenizer.ggml.scores"); s != nullptr) {
    if (!s->is_array() || s->elem_type != GgufType::kFloat32) {
      fail_expected(f.path() + ": tokenizer.ggml.scores", "an array of float32",
                    std::string(gguf_type_name(s->type)) + " " + s->describe());
    }
    for (const GgufValue& x : s->items())
      scores.push_back(static_cast<float>(std::get<double>(x.data)));
  }
  // llama2.c's tokenizer has <unk>, <s>, </s> at 0, 1, 2.
  for (const auto& [key, want] : {std::pair<const char*, int>{"tokenizer.ggml.bos_token_id", 1},
                                  {"tokenizer.ggml.eos_token_id", 2}}) {
    if (int id = special_id(f, key, vocab); id >= 0 && id != want) {
      fail_expected(f.path() + ": " + key,
                    std::to_string(want) + " (the llama2.c tokenizer's layout)",
                    std::to_string(id));
    }
  }
  const std::string space = "\xE2\x96\x81";  // SentencePiece's U+2581 stands for a space
  for (std::string& t : tokens) {
    std::string spaced;
    for (std::size_t i = 0; i < t.size();) {
      const bool is_space = t.compare(i, space.size(), space) == 0;
      spaced += is_space ? ' ' : t[i];
      i += is_space ? space.size() : 1;
    }
    t = std::move(spaced);
  }
  return std::make_shared<Llama2cTokenizer>(f.path(), std::move(tokens), std::move(scores), vocab);
}

}  // namespace

std::shared_ptr<const Tokenizer> load_gguf_tokenizer(const GgufFile& f, int expected_vocab_size) {
  const std::string model = f.require_string("tokenizer.ggml.model");
  std::vector<std::string> tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (static_cast<int>(tokens.size()) != expected_vocab_size) {
    fail_expected(f.path() + ": tokenizer.ggml.tokens",
                  std::to_string(expected_vocab_size) + " tokens (the model's vocab_size)",
                  std::to_string(tokens.size()));
  }
  if (model == "gpt2") return load_bpe(f, std::move(tokens), expected_vocab_size);
  if (model == "llama") return load_sentencepiece(f, std::move(tokens), expected_vocab_size);
  fail_expected(f.path() + ": tokenizer.ggml.model",
                "\"gpt2\" (byte-level BPE) or \"llama\" (SentencePiece)", "\"" + model + "\"");
}

}  // namespace kvscope

// tokenizer.json: the file checked part by part (model, normalizer, pre-tokenizer, decoder,
// post-processor, added tokens) into a BpeVocab with Hugging Face's rules, then a BpeTokenizer.
#include "engine/model/tokenizer_json.h"

#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

#include "engine/common/error.h"
#include "engine/common/json_depth.h"
#include "engine/common/mapped_file.h"
#include "engine/model/bpe_tokenizer.h"

namespace kvscope {
namespace {

using json = nlohmann::json;

// The Split patterns recognised, as the tokenizer.json files of these models spell them.
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A JSON value as an error message shows it: strings quoted and cut, containers by their size.
std::string describe(const json* v) {
  if (v == nullptr) return "nothing";
  if (v->is_string()) return quoted_value(v->get_ref<const std::string&>());
  const std::string n = std::to_string(v->size());
  if (v->is_array()) return "an array of " + n + (v->size() == 1 ? " item" : " items");
  if (v->is_object()) return "an object with " + n + (v->size() == 1 ? " key" : " keys");
  return v->dump();
}

// Reads one tokenizer.json document; every error names the file and the field.
class Reader {
 public:
  Reader(const json& root, std::string path) : root_(root), path_(std::move(path)) {}

  BpeVocab read() {
    vocab_.path = path_;
    vocab_.tokens_field = "model.vocab";
    vocab_.merges_field = "model.merges";
    vocab_.hf_rules = true;
    read_model();
    read_normalizer(member(root_, "normalizer"), "normalizer");
    read_pre_tokenizer();
    read_decoder(member(root_, "decoder"), "decoder");
    read_added_tokens();  // before the post-processor, whose ids may be added tokens'
    read_post_processor(member(root_, "post_processor"), "post_processor");
    return std::move(vocab_);
  }

 private:
  [[noreturn]] void fail(const std::string& field, const std::string& expected,
                         const json* got) const {
    fail_expected(path_ + ": " + field, expected, describe(got));
  }

  // The value of `key` in `object`, null when it has none (or is not an object).
  static const json* member(const json& object, const std::string& key) {
    if (!object.is_object()) return nullptr;
    auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
  }

  const json& object_at(const json& parent, const char* key, const std::string& field) const {
    const json* v = member(parent, key);
    if (v == nullptr || !v->is_object()) fail(field, "an object", v);
    return *v;
  }

  // The "type" of a component object.
  std::string type_of(const json& component, const std::string& field) const {
    if (!component.is_object()) fail(field, "an object with a \"type\"", &component);
    const json* t = member(component, "type");
    if (t == nullptr || !t->is_string()) fail(field + ".type", "a string", t);
    return t->get<std::string>();
  }

  // A boolean field: `fallback` when absent.
  bool flag(const json& object, const char* key, const std::string& field, bool fallback) const {
    const json* v = member(object, key);
    if (v == nullptr || v->is_null()) return fallback;
    if (!v->is_boolean()) fail(field, "true or false", v);
    return v->get<bool>();
  }

  // Fields that must be absent, null or `allowed` (false, "" or 0) for byte-level BPE.
  void require_off(const json& object, const char* key, const std::string& field,
                   const std::string& expected) const {
    const json* v = member(object, key);
    if (v == nullptr || v->is_null() || (v->is_boolean() && !v->get<bool>()) ||
        (v->is_string() && v->get_ref<const std::string&>().empty()) ||
        (v->is_number() && v->get<double>() == 0.0)) {
      return;
    }
    fail(field, expected, v);
  }

  void read_model() {
    const json& model = object_at(root_, "model", "model");
    const json* type = member(model, "type");
    // Files from old tokenizers versions may leave the type out: a model with merges is BPE.
    if (type != nullptr || !model.contains("merges")) {
      if (type == nullptr || !type->is_string() || type->get_ref<const std::string&>() != "BPE") {
        fail("model.type", "\"BPE\" (byte-level BPE tokenizers)", type);
      }
    }
    require_off(model, "dropout", "model.dropout", "null (BPE dropout is random)");
    require_off(model, "byte_fallback", "model.byte_fallback",
                "false (byte-level BPE; byte fallback is SentencePiece-style BPE's)");
    require_off(model, "continuing_subword_prefix", "model.continuing_subword_prefix",
                "null (byte-level BPE has no subword prefix)");
    require_off(model, "end_of_word_suffix", "model.end_of_word_suffix",
                "null (byte-level BPE has no end-of-word suffix)");
    vocab_.ignore_merges = flag(model, "ignore_merges", "model.ignore_merges", false);
    vocab_.fuse_unk = flag(model, "fuse_unk", "model.fuse_unk", false);

    const json& tokens = object_at(model, "vocab", "model.vocab");
    if (tokens.empty()) fail("model.vocab", "at least one token", &tokens);
    const std::size_t n = tokens.size();
    vocab_.tokens.assign(n, std::string());
    std::vector<bool> seen(n, false);  // [vocab] an entry has this id
    for (const auto& [text, id] : tokens.items()) {
      const std::string field = "model.vocab[" + quoted_value(text) + "]";
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0 ||
          id.get<std::int64_t>() >= static_cast<std::int64_t>(n)) {
        fail(field, "a token id in [0, " + std::to_string(n) + ") (ids 0..n-1, one per token)",
             &id);
      }
      const auto i = static_cast<std::size_t>(id.get<std::int64_t>());
      if (seen[i]) {
        fail_expected(path_ + ": " + field, "an id no other token has",
                      std::to_string(i) + " (also " + quoted_value(vocab_.tokens[i]) + ")");
      }
      seen[i] = true;
      vocab_.tokens[i] = text;
    }
    vocab_.token_types.assign(n, static_cast<int>(GgmlTokenType::kNormal));

    if (const json* unk = member(model, "unk_token"); unk != nullptr && !unk->is_null()) {
      const json* id = unk->is_string() ? member(tokens, unk->get<std::string>()) : nullptr;
      if (id == nullptr) fail("model.unk_token", "null or a token of model.vocab", unk);
      vocab_.unk_id = static_cast<int>(id->get<std::int64_t>());
      vocab_.unk_bytes = true;
    }

    const json* merges = member(model, "merges");
    if (merges == nullptr || !merges->is_array()) fail("model.merges", "an array", merges);
    vocab_.merges.reserve(merges->size());
    // All "left right" strings (tokenizers before 0.20) or all ["left", "right"] pairs.
    const bool pairs = !merges->empty() && (*merges)[0].is_array();
    for (std::size_t r = 0; r < merges->size(); ++r) {
      const json& m = (*merges)[r];
      const std::string field = "model.merges[" + std::to_string(r) + "]";
      if (r == 0 && !m.is_string() && !m.is_array()) {
        fail(field, "a \"left right\" string or a [\"left\", \"right\"] pair", &m);
      }
      if (!pairs) {
        if (!m.is_string()) fail(field, "a \"left right\" string like merges[0]", &m);
        vocab_.merges.push_back(m.get<std::string>());
        continue;
      }
      if (!m.is_array() || m.size() != 2 || !m[0].is_string() || !m[1].is_string()) {
        fail(field, "a pair [\"left\", \"right\"] of token texts like merges[0]", &m);
      }
      const auto& left = m[0].get_ref<const std::string&>();
      const auto& right = m[1].get_ref<const std::string&>();
      if (left.empty() || right.empty() || left.find(' ') != std::string::npos ||
          right.find(' ') != std::string::npos) {
        fail_expected(path_ + ": " + field,
                      "two non-empty token texts without spaces (byte-level BPE tokens have none)",
                      "[" + quoted_value(left) + ", " + quoted_value(right) + "]");
      }
      vocab_.merges.push_back(left + " " + right);
    }
  }

  void read_normalizer(const json* v, const std::string& field) {
    if (v == nullptr || v->is_null()) return;
    const std::string type = type_of(*v, field);
    if (type == "NFC") {
      vocab_.nfc = true;
      return;
    }
    if (type == "Sequence") {
      const json* steps = member(*v, "normalizers");
      if (steps == nullptr || !steps->is_array()) fail(field + ".normalizers", "an array", steps);
      for (std::size_t i = 0; i < steps->size(); ++i) {
        read_normalizer(&(*steps)[i], field + ".normalizers[" + std::to_string(i) + "]");
      }
      return;
    }
    fail(field + ".type", "null or \"NFC\" (normalizers that change text otherwise are not read)",
         member(*v, "type"));
  }

  void read_pre_tokenizer() {
    const json* pre = member(root_, "pre_tokenizer");
    const std::string expected_byte_level =
        "ByteLevel, alone or last in a Sequence (byte-level BPE)";
    if (pre == nullptr || pre->is_null()) fail("pre_tokenizer", expected_byte_level, pre);
    std::vector<PreSplit> steps;
    if (type_of(*pre, "pre_tokenizer") != "Sequence") {
      read_byte_level(*pre, "pre_tokenizer", expected_byte_level, steps);
    } else {
      const json* list = member(*pre, "pretokenizers");
      if (list == nullptr || !list->is_array() || list->empty()) {
        fail("pre_tokenizer.pretokenizers", "a non-empty array", list);
      }
      for (std::size_t i = 0; i < list->size(); ++i) {
        const std::string field = "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]";
        if (i + 1 == list->size()) {
          read_byte_level((*list)[i], field, expected_byte_level, steps);
        } else {
          read_split_step((*list)[i], field, steps);
        }
      }
    }
    vocab_.pre_splits = std::move(steps);
  }

  void read_byte_level(const json& v, const std::string& field, const std::string& expected,
                       std::vector<PreSplit>& steps) const {
    const std::string type = type_of(v, field);
    if (type != "ByteLevel") fail(field + ".type", expected, member(v, "type"));
    if (flag(v, "add_prefix_space", field + ".add_prefix_space", false)) {
      fail(field + ".add_prefix_space", "false (a space put before the text is not supported)",
           member(v, "add_prefix_space"));
    }
    if (flag(v, "use_regex", field + ".use_regex", true)) steps.push_back(PreSplit::kGpt2);
  }

  void read_split_step(const json& v, const std::string& field,
                       std::vector<PreSplit>& steps) const {
    const std::string type = type_of(v, field);
    if (type == "Digits") {
      const bool each = flag(v, "individual_digits", field + ".individual_digits", false);
      steps.push_back(each ? PreSplit::kDigits : PreSplit::kDigitRuns);
      return;
    }
    if (type != "Split") {
      fail(field + ".type", "\"Split\" or \"Digits\" before the last step (ByteLevel)",
           member(v, "type"));
    }
    const json* pattern = member(v, "pattern");
    const json* regex =
        pattern != nullptr && pattern->is_object() ? member(*pattern, "Regex") : nullptr;
    if (regex == nullptr || !regex->is_string()) {
      fail(field + ".pattern", "{\"Regex\": ...} (a regular expression)", pattern);
    }
    const auto& text = regex->get_ref<const std::string&>();
    if (text == kGpt2Regex) {
      steps.push_back(PreSplit::kGpt2);
    } else if (text == kLlama3Regex) {
      steps.push_back(PreSplit::kLlama3);
    } else if (text == kQwen2Regex) {
      steps.push_back(PreSplit::kQwen2);
    } else {
      fail(field + ".pattern.Regex", "GPT-2's, Llama-3's or Qwen2's pattern", regex);
    }
    const json* behavior = member(v, "behavior");
    if (behavior == nullptr || !behavior->is_string() ||
        behavior->get_ref<const std::string&>() != "Isolated") {
      fail(field + ".behavior", "\"Isolated\"", behavior);
    }
    if (flag(v, "invert", field + ".invert", false)) {
      fail(field + ".invert", "false", member(v, "invert"));
    }
  }

  void read_decoder(const json* v, const std::string& field) const {
    if (v == nullptr || v->is_null()) return;
    const std::string type = type_of(*v, field);
    if (type == "ByteLevel") return;
    if (type == "Sequence") {
      const json* steps = member(*v, "decoders");
      if (steps == nullptr || !steps->is_array()) fail(field + ".decoders", "an array", steps);
      for (std::size_t i = 0; i < steps->size(); ++i) {
        read_decoder(&(*steps)[i], field + ".decoders[" + std::to_string(i) + "]");
      }
      return;
    }
    fail(field + ".type", "null or \"ByteLevel\" (byte-level BPE)", member(*v, "type"));
  }

  void read_added_tokens() {
    const json* list = member(root_, "added_tokens");
    if (list == nullptr || list->is_null()) return;
    if (!list->is_array()) fail("added_tokens", "an array", list);
    const int model_size = static_cast<int>(vocab_.tokens.size());
    std::unordered_map<std::string, int> ids;  // token text -> id, the vocabulary's and added
    ids.reserve(vocab_.tokens.size() + list->size());
    for (int i = 0; i < model_size; ++i) ids.emplace(vocab_.tokens[static_cast<std::size_t>(i)], i);
    for (std::size_t k = 0; k < list->size(); ++k) {
      const json& t = (*list)[k];
      const std::string field = "added_tokens[" + std::to_string(k) + "]";
      if (!t.is_object()) fail(field, "an object", &t);
      const json* content = member(t, "content");
      if (content == nullptr || !content->is_string() || content->get<std::string>().empty()) {
        fail(field + ".content", "a non-empty string", content);
      }
      const std::string& text = content->get_ref<const std::string&>();
      // Hugging Face gives a text the vocabulary has its id there, and a new one the next id.
      auto known = ids.find(text);
      const int want = known != ids.end() ? known->second : static_cast<int>(ids.size());
      const json* id = member(t, "id");
      if (id == nullptr || !id->is_number_integer() || id->get<std::int64_t>() != want) {
        fail(field + ".id",
             std::to_string(want) +
                 (known != ids.end() ? " (the id of " + quoted_value(text) + ")"
                                     : " (the next id after the vocabulary and the added tokens "
                                       "before it)"),
             id);
      }
      for (const char* key : {"lstrip", "rstrip", "single_word"}) {
        if (flag(t, key, field + "." + key, false)) {
          fail(field + "." + key, "false (stripping and whole-word matching are not supported)",
               member(t, key));
        }
      }
      const bool special = flag(t, "special", field + ".special", false);
      if (known == ids.end()) {
        ids.emplace(text, want);
        vocab_.tokens.push_back(text);
        vocab_.token_types.push_back(0);
      }
      const auto u = static_cast<std::size_t>(want);
      vocab_.token_types[u] =
          static_cast<int>(special ? GgmlTokenType::kControl : GgmlTokenType::kUserDefined);
      if (flag(t, "normalized", field + ".normalized", !special)) {
        vocab_.normalized_added.push_back(want);
      }
      if (special && is_end_of_generation_text(text)) vocab_.extra_stop_ids.push_back(want);
    }
  }

  void read_post_processor(const json* v, const std::string& field) {
    if (v == nullptr || v->is_null()) return;
    const std::string type = type_of(*v, field);
    if (type == "ByteLevel") return;
    if (type == "Sequence") {
      const json* steps = member(*v, "processors");
      if (steps == nullptr || !steps->is_array()) fail(field + ".processors", "an array", steps);
      for (std::size_t i = 0; i < steps->size(); ++i) {
        read_post_processor(&(*steps)[i], field + ".processors[" + std::to_string(i) + "]");
      }
      return;
    }
    if (type != "TemplateProcessing") {
      fail(field + ".type", "null, \"ByteLevel\" or \"TemplateProcessing\"", member(*v, "type"));
    }
    const json* single = member(*v, "single");
    const std::string expected = "[special token] $A [special token] (at most one on each side)";
    if (single == nullptr || !single->is_array()) fail(field + ".single", expected, single);
    std::vector<int> before, after;  // special token ids around $A
    bool seen_a = false;
    for (std::size_t i = 0; i < single->size(); ++i) {
      const json& piece = (*single)[i];
      const std::string at = field + ".single[" + std::to_string(i) + "]";
      const json* seq = member(piece, "Sequence");
      const json* special = member(piece, "SpecialToken");
      const json* seq_id = seq != nullptr ? member(*seq, "id") : nullptr;
      if (!seen_a && seq_id != nullptr && *seq_id == "A") {
        seen_a = true;
      } else if (special != nullptr && special->is_object()) {
        (seen_a ? after : before).push_back(template_token(*v, *special, at, field));
      } else {
        fail(field + ".single", expected, single);
      }
    }
    if (!seen_a || before.size() > 1 || after.size() > 1) fail(field + ".single", expected, single);
    if (!before.empty()) {
      vocab_.bos_id = before[0];
      vocab_.adds_bos = true;
    }
    if (!after.empty()) {
      vocab_.eos_id = after[0];
    }
  }

  // The one id of a template's special token, from the template's special_tokens.
  int template_token(const json& processor, const json& special, const std::string& at,
                     const std::string& field) const {
    const json* name = member(special, "id");
    if (name == nullptr || !name->is_string()) fail(at + ".SpecialToken.id", "a string", name);
    const json* tokens = member(processor, "special_tokens");
    const json* entry = tokens != nullptr ? member(*tokens, name->get<std::string>()) : nullptr;
    const std::string where =
        field + ".special_tokens[" + quoted_value(name->get<std::string>()) + "]";
    if (entry == nullptr || !entry->is_object()) fail(where, "an object", entry);
    const json* ids = member(*entry, "ids");
    if (ids == nullptr || !ids->is_array() || ids->size() != 1 || !(*ids)[0].is_number_integer() ||
        (*ids)[0].get<std::int64_t>() < 0 ||
        (*ids)[0].get<std::int64_t>() >= static_cast<std::int64_t>(vocab_.tokens.size())) {
      fail(where + ".ids", "one token id in [0, " + std::to_string(vocab_.tokens.size()) + ")",
           ids);
    }
    return static_cast<int>((*ids)[0].get<std::int64_t>());
  }

  const json& root_;
  std::string path_;
  BpeVocab vocab_;
};

}  // namespace

std::shared_ptr<const Tokenizer> parse_tokenizer_json(std::string_view text,
                                                      const std::string& path) {
  if (text.size() > kMaxTokenizerJsonBytes) {
    fail_expected(
        path,
        "a tokenizer.json of at most " + std::to_string(kMaxTokenizerJsonBytes >> 20) + " MiB",
        std::to_string(text.size()) + " bytes");
  }
  std::size_t deep_at = 0;
  if (!json_nesting_within(text, kMaxJsonDepth, &deep_at)) {
    fail_expected(path + ": byte " + std::to_string(deep_at),
                  "JSON nested at most " + std::to_string(kMaxJsonDepth) + " arrays/objects deep",
                  "deeper nesting");
  }
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    fail_expected(path + ": byte " + std::to_string(e.byte), "JSON (a Hugging Face tokenizer.json)",
                  "invalid JSON");
  } catch (const json::exception&) {
    fail_expected(path, "JSON (a Hugging Face tokenizer.json)",
                  "invalid JSON (a number out of range)");
  }
  if (!root.is_object()) {
    fail_expected(path, "a JSON object (a Hugging Face tokenizer.json)", describe(&root));
  }
  return std::make_shared<BpeTokenizer>(Reader(root, path).read());
}

std::shared_ptr<const Tokenizer> load_tokenizer_json(const std::string& path) {
  const MappedFile file(path);
  if (file.size() > kMaxTokenizerJsonBytes) {
    fail_expected(
        path,
        "a tokenizer.json of at most " + std::to_string(kMaxTokenizerJsonBytes >> 20) + " MiB",
        std::to_string(file.size()) + " bytes");
  }
  const auto bytes = file.bytes();
  return parse_tokenizer_json(
      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path);
}

bool is_tokenizer_json_path(std::string_view path) {
  return path.ends_with(".json");
}

}  // namespace kvscope

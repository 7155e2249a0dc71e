// tokenizer.json refusals: every kind of tokenizer or setting that is not read gets a one-line
// kvscope::Error naming the file, the JSON field, the value and what was expected; broken files
// (missing, empty, too large, not JSON, too deep, randomly corrupted) never crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "engine/model/tokenizer_json.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

using json = nlohmann::json;

const std::string kFixture =
    std::string(KVSCOPE_SOURCE_DIR) + "/tests/data/tokenizer_json/edge_dropped_byte.json";

// A small valid tokenizer.json (256 byte tokens less one, two merges, two added tokens).
json base() {
  return json::parse(test::read_text(kFixture));
}

// The message loading `doc` as "tok.json" fails with ("" when it loads).
std::string error_of_text(const std::string& text) {
  try {
    parse_tokenizer_json(text, "tok.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
std::string error_of(const json& doc) {
  return error_of_text(doc.dump());
}

const std::string kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

json split(const std::string& regex) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", regex}}},
          {"behavior", "Isolated"},
          {"invert", false}};
}
json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", use_regex}};
}
json sequence(const json& steps) {
  return {{"type", "Sequence"}, {"pretokenizers", steps}};
}

TEST(TokenizerJsonErrors, BaseFileLoads) {
  EXPECT_EQ(parse_tokenizer_json(base().dump(), "tok.json")->vocab_size(), 258);
}

TEST(TokenizerJsonErrors, RefusesOtherModels) {
  for (const char* type : {"WordPiece", "Unigram", "WordLevel"}) {
    json doc = base();
    doc["model"]["type"] = type;
    EXPECT_EQ(error_of(doc), std::string("tok.json: model.type: expected \"BPE\" (byte-level BPE "
                                         "tokenizers), got \"") +
                                 type + "\"");
  }
  json no_model = base();
  no_model.erase("model");
  EXPECT_EQ(error_of(no_model), "tok.json: model: expected an object, got nothing");
  json no_vocab = base();
  no_vocab["model"].erase("vocab");
  EXPECT_EQ(error_of(no_vocab), "tok.json: model.vocab: expected an object, got nothing");
  json empty_vocab = base();
  empty_vocab["model"]["vocab"] = json::object();
  empty_vocab["model"]["merges"] = json::array();
  empty_vocab["added_tokens"] = json::array();
  EXPECT_EQ(error_of(empty_vocab),
            "tok.json: model.vocab: expected at least one token, got an object with 0 keys");
  // Without a "type", a model with merges is BPE (files of old tokenizers versions).
  json untyped = base();
  untyped["model"].erase("type");
  EXPECT_EQ(error_of(untyped), "");
}

TEST(TokenizerJsonErrors, RefusesSentencePieceStyleBpeSettings) {
  json fallback = base();
  fallback["model"]["byte_fallback"] = true;
  EXPECT_EQ(error_of(fallback),
            "tok.json: model.byte_fallback: expected false (byte-level BPE; byte fallback is "
            "SentencePiece-style BPE's), got true");
  json dropout = base();
  dropout["model"]["dropout"] = 0.1;
  EXPECT_EQ(error_of(dropout),
            "tok.json: model.dropout: expected null (BPE dropout is random), got 0.1");
  json prefix = base();
  prefix["model"]["continuing_subword_prefix"] = "##";
  EXPECT_EQ(error_of(prefix),
            "tok.json: model.continuing_subword_prefix: expected null (byte-level BPE has no "
            "subword prefix), got \"##\"");
  json suffix = base();
  suffix["model"]["end_of_word_suffix"] = "</w>";
  EXPECT_EQ(error_of(suffix),
            "tok.json: model.end_of_word_suffix: expected null (byte-level BPE has no "
            "end-of-word suffix), got \"</w>\"");
  json unk = base();
  unk["model"]["unk_token"] = "<unk>";
  EXPECT_EQ(error_of(unk),
            "tok.json: model.unk_token: expected null or a token of model.vocab, got \"<unk>\"");
}

TEST(TokenizerJsonErrors, RefusesBadVocabularies) {
  json range = base();
  range["model"]["vocab"]["q"] = 9999;
  EXPECT_EQ(error_of(range),
            "tok.json: model.vocab[\"q\"]: expected a token id in [0, 257) (ids 0..n-1, one per "
            "token), got 9999");
  json negative = base();
  negative["model"]["vocab"]["q"] = -1;
  EXPECT_EQ(error_of(negative),
            "tok.json: model.vocab[\"q\"]: expected a token id in [0, 257) (ids 0..n-1, one per "
            "token), got -1");
  json text_id = base();
  text_id["model"]["vocab"]["q"] = "80";
  EXPECT_EQ(error_of(text_id),
            "tok.json: model.vocab[\"q\"]: expected a token id in [0, 257) (ids 0..n-1, one per "
            "token), got \"80\"");
  json twice = base();
  twice["model"]["vocab"]["r"] = twice["model"]["vocab"]["q"];
  EXPECT_EQ(error_of(twice),
            "tok.json: model.vocab[\"r\"]: expected an id no other token has, got 113 (also "
            "\"q\")");
}

TEST(TokenizerJsonErrors, RefusesBadMerges) {
  json missing = base();
  missing["model"].erase("merges");
  EXPECT_EQ(error_of(missing), "tok.json: model.merges: expected an array, got nothing");
  json first = base();
  first["model"]["merges"][0] = 7;
  EXPECT_EQ(error_of(first),
            "tok.json: model.merges[0]: expected a \"left right\" string or a [\"left\", "
            "\"right\"] pair, got 7");
  json mixed = base();
  mixed["model"]["merges"][1] = "b c";
  EXPECT_EQ(error_of(mixed),
            "tok.json: model.merges[1]: expected a pair [\"left\", \"right\"] of token texts like "
            "merges[0], got \"b c\"");
  json mixed_strings = base();
  mixed_strings["model"]["merges"] = {"b c", json::array({"b", "c"})};
  EXPECT_EQ(error_of(mixed_strings),
            "tok.json: model.merges[1]: expected a \"left right\" string like merges[0], got an "
            "array of 2 items");
  json triple = base();
  triple["model"]["merges"][1] = {"b", "c", "d"};
  EXPECT_EQ(error_of(triple),
            "tok.json: model.merges[1]: expected a pair [\"left\", \"right\"] of token texts like "
            "merges[0], got an array of 3 items");
  json spaced = base();
  spaced["model"]["merges"][1] = {"b c", "d"};
  EXPECT_EQ(error_of(spaced),
            "tok.json: model.merges[1]: expected two non-empty token texts without spaces "
            "(byte-level BPE tokens have none), got [\"b c\", \"d\"]");
  // The checks the GGUF reader shares name the tokenizer.json fields.
  json unknown = base();
  unknown["model"]["merges"][1] = {"zz", "c"};
  EXPECT_EQ(
      error_of(unknown),
      "tok.json: model.merges[1]: expected a merge of two tokens, got \"zz c\" (\"zz\" is not "
      "a token)");
  json no_result = base();
  no_result["model"]["merges"][1] = {"x", "y"};
  EXPECT_EQ(error_of(no_result),
            "tok.json: model.merges[1]: expected a merge whose result is a token, got \"x y\" "
            "(\"xy\" is not a token)");
  json bad_string = base();
  bad_string["model"]["merges"] = {"b c", "bc"};
  EXPECT_EQ(error_of(bad_string),
            "tok.json: model.merges[1]: expected \"left right\" (two pieces and one space), got "
            "\"bc\"");
}

TEST(TokenizerJsonErrors, RefusesNormalizersThatChangeText) {
  for (const char* type : {"NFKC", "NFD", "Lowercase", "Replace", "Precompiled"}) {
    json doc = base();
    doc["normalizer"] = {{"type", type}};
    EXPECT_EQ(error_of(doc), std::string("tok.json: normalizer.type: expected null or \"NFC\" "
                                         "(normalizers that change text otherwise are not read), "
                                         "got \"") +
                                 type + "\"");
  }
  json nested = base();
  nested["normalizer"] = {{"type", "Sequence"},
                          {"normalizers", {{{"type", "NFC"}}, {{"type", "Prepend"}}}}};
  EXPECT_EQ(error_of(nested),
            "tok.json: normalizer.normalizers[1].type: expected null or \"NFC\" (normalizers that "
            "change text otherwise are not read), got \"Prepend\"");
  json untyped = base();
  untyped["normalizer"] = {{"kind", "NFC"}};
  EXPECT_EQ(error_of(untyped), "tok.json: normalizer.type: expected a string, got nothing");
  json nfc = base();
  nfc["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
  EXPECT_EQ(error_of(nfc), "");
}

TEST(TokenizerJsonErrors, RefusesOtherPreTokenizers) {
  const std::string byte_level_expected =
      "expected ByteLevel, alone or last in a Sequence (byte-level BPE), got ";
  json none = base();
  none.erase("pre_tokenizer");
  EXPECT_EQ(error_of(none), "tok.json: pre_tokenizer: " + byte_level_expected + "nothing");
  json null = base();
  null["pre_tokenizer"] = nullptr;
  EXPECT_EQ(error_of(null), "tok.json: pre_tokenizer: " + byte_level_expected + "null");
  json metaspace = base();
  metaspace["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}};
  EXPECT_EQ(error_of(metaspace),
            "tok.json: pre_tokenizer.type: " + byte_level_expected + "\"Metaspace\"");
  json last = base();
  last["pre_tokenizer"] = sequence({byte_level(false), split(kGpt2Regex)});
  EXPECT_EQ(error_of(last),
            "tok.json: pre_tokenizer.pretokenizers[0].type: expected \"Split\" or "
            "\"Digits\" before the last step (ByteLevel), got \"ByteLevel\"");
  json whitespace = base();
  whitespace["pre_tokenizer"] = sequence({{{"type", "Whitespace"}}, byte_level(false)});
  EXPECT_EQ(error_of(whitespace),
            "tok.json: pre_tokenizer.pretokenizers[0].type: expected \"Split\" or \"Digits\" "
            "before the last step (ByteLevel), got \"Whitespace\"");
  json empty = base();
  empty["pre_tokenizer"] = sequence(json::array());
  EXPECT_EQ(error_of(empty),
            "tok.json: pre_tokenizer.pretokenizers: expected a non-empty array, got an array of 0 "
            "items");
  json prefix = base();
  prefix["pre_tokenizer"]["add_prefix_space"] = true;
  EXPECT_EQ(error_of(prefix),
            "tok.json: pre_tokenizer.add_prefix_space: expected false (a space put before the "
            "text is not supported), got true");
}

TEST(TokenizerJsonErrors, RefusesSplitsItCannotRun) {
  json regex = base();
  regex["pre_tokenizer"] = sequence({split(R"(\p{N}{1,3})"), byte_level(false)});
  EXPECT_EQ(error_of(regex),
            "tok.json: pre_tokenizer.pretokenizers[0].pattern.Regex: expected GPT-2's, Llama-3's "
            "or Qwen2's pattern, got \"\\\\p{N}{1,3}\"");
  json literal = base();
  literal["pre_tokenizer"] = sequence({split(kGpt2Regex), byte_level(false)});
  literal["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", " "}};
  EXPECT_EQ(error_of(literal),
            "tok.json: pre_tokenizer.pretokenizers[0].pattern: expected {\"Regex\": ...} (a "
            "regular expression), got an object with 1 key");
  json removed = base();
  removed["pre_tokenizer"] = sequence({split(kGpt2Regex), byte_level(false)});
  removed["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  EXPECT_EQ(error_of(removed),
            "tok.json: pre_tokenizer.pretokenizers[0].behavior: expected \"Isolated\", got "
            "\"Removed\"");
  json inverted = base();
  inverted["pre_tokenizer"] = sequence({split(kGpt2Regex), byte_level(false)});
  inverted["pre_tokenizer"]["pretokenizers"][0]["invert"] = true;
  EXPECT_EQ(error_of(inverted),
            "tok.json: pre_tokenizer.pretokenizers[0].invert: expected false, got true");
  json ok = base();
  ok["pre_tokenizer"] = sequence({split(kGpt2Regex), byte_level(false)});
  EXPECT_EQ(error_of(ok), "");
}

TEST(TokenizerJsonErrors, RefusesOtherDecodersAndPostProcessors) {
  json decoder = base();
  decoder["decoder"] = {{"type", "Metaspace"}};
  EXPECT_EQ(error_of(decoder),
            "tok.json: decoder.type: expected null or \"ByteLevel\" (byte-level BPE), got "
            "\"Metaspace\"");
  json nested = base();
  nested["decoder"] = {{"type", "Sequence"},
                       {"decoders", {{{"type", "ByteLevel"}}, {{"type", "ByteFallback"}}}}};
  EXPECT_EQ(error_of(nested),
            "tok.json: decoder.decoders[1].type: expected null or \"ByteLevel\" (byte-level BPE), "
            "got \"ByteFallback\"");
  json roberta = base();
  roberta["post_processor"] = {{"type", "RobertaProcessing"}};
  EXPECT_EQ(error_of(roberta),
            "tok.json: post_processor.type: expected null, \"ByteLevel\" or "
            "\"TemplateProcessing\", got \"RobertaProcessing\"");
  const json special = {{"SpecialToken", {{"id", "abc"}, {"type_id", 0}}}};
  const json a = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
  const json tokens = {{"abc", {{"id", "abc"}, {"ids", {257}}, {"tokens", {"abc"}}}}};
  json two = base();
  two["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single", {special, special, a}},
                           {"special_tokens", tokens}};
  EXPECT_EQ(error_of(two),
            "tok.json: post_processor.single: expected [special token] $A [special token] (at "
            "most one on each side), got an array of 3 items");
  json unnamed = base();
  unnamed["post_processor"] = {
      {"type", "TemplateProcessing"}, {"single", {special, a}}, {"special_tokens", json::object()}};
  EXPECT_EQ(error_of(unnamed),
            "tok.json: post_processor.special_tokens[\"abc\"]: expected an object, got nothing");
  json many_ids = base();
  many_ids["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {special, a}},
      {"special_tokens", {{"abc", {{"id", "abc"}, {"ids", {256, 257}}}}}}};
  EXPECT_EQ(error_of(many_ids),
            "tok.json: post_processor.special_tokens[\"abc\"].ids: expected one token id in [0, "
            "258), got an array of 2 items");
  json bos_eos = base();
  bos_eos["post_processor"] = {{"type", "Sequence"},
                               {"processors",
                                {{{"type", "ByteLevel"}},
                                 {{"type", "TemplateProcessing"},
                                  {"single", {special, a, special}},
                                  {"special_tokens", tokens}}}}};
  const auto tok = parse_tokenizer_json(bos_eos.dump(), "tok.json");
  EXPECT_TRUE(tok->adds_bos());
  EXPECT_EQ(tok->bos_id(), 257);
  EXPECT_EQ(tok->encode("q", true, true), (std::vector<int>{257, 113, 257}));
}

TEST(TokenizerJsonErrors, RefusesAddedTokensItCannotMatch) {
  json id = base();
  id["added_tokens"][0]["id"] = 300;
  EXPECT_EQ(error_of(id),
            "tok.json: added_tokens[0].id: expected 257 (the next id after the vocabulary and the "
            "added tokens before it), got 300");
  json known = base();
  known["added_tokens"][0]["content"] = "q";
  EXPECT_EQ(error_of(known),
            "tok.json: added_tokens[0].id: expected 113 (the id of \"q\"), got 257");
  for (const char* key : {"lstrip", "rstrip", "single_word"}) {
    json doc = base();
    doc["added_tokens"][1][key] = true;
    EXPECT_EQ(error_of(doc), std::string("tok.json: added_tokens[1].") + key +
                                 ": expected false (stripping and whole-word matching are not "
                                 "supported), got true");
  }
  json empty = base();
  empty["added_tokens"][0]["content"] = "";
  EXPECT_EQ(error_of(empty),
            "tok.json: added_tokens[0].content: expected a non-empty string, got \"\"");
  json list = base();
  list["added_tokens"] = "abc";
  EXPECT_EQ(error_of(list), "tok.json: added_tokens: expected an array, got \"abc\"");
}

TEST(TokenizerJsonErrors, RefusesFilesThatAreNotTokenizerJson) {
  EXPECT_EQ(error_of_text("hello"),
            "tok.json: byte 1: expected JSON (a Hugging Face tokenizer.json), got invalid JSON");
  EXPECT_EQ(error_of_text("{\"model\": {"),
            "tok.json: byte 12: expected JSON (a Hugging Face tokenizer.json), got invalid JSON");
  EXPECT_EQ(error_of_text("[1, 2]"),
            "tok.json: expected a JSON object (a Hugging Face tokenizer.json), got an array of 2 "
            "items");
  EXPECT_EQ(error_of_text("\"tok\""),
            "tok.json: expected a JSON object (a Hugging Face tokenizer.json), got \"tok\"");
  EXPECT_EQ(error_of_text(std::string(100, '[') + std::string(100, ']')),
            "tok.json: byte 64: expected JSON nested at most 64 arrays/objects deep, got deeper "
            "nesting");
  EXPECT_EQ(error_of_text("{\"model\": 1e999}"),
            "tok.json: expected JSON (a Hugging Face tokenizer.json), got invalid JSON (a number "
            "out of range)");
  std::string huge(kMaxTokenizerJsonBytes + 1, ' ');
  EXPECT_EQ(error_of_text(huge),
            "tok.json: expected a tokenizer.json of at most 64 MiB, got 67108865 bytes");

  const std::string missing = test::temp_path("missing.json");
  EXPECT_EQ(test::error_of([&] { load_tokenizer_json(missing); }),
            missing + ": cannot open: No such file or directory");
  const std::string dir = test::temp_path("a_directory.json");
  std::filesystem::create_directories(dir);
  EXPECT_EQ(test::error_of([&] { load_tokenizer_json(dir); }),
            dir + ": expected a file, got a directory");
  const std::string empty = test::temp_path("empty.json");
  test::write_bytes(empty, {});
  EXPECT_EQ(test::error_of([&] { load_tokenizer_json(empty); }),
            empty + ": expected a non-empty file, got 0 bytes");
}

// Random byte changes, cuts and splices of a real file: each load ends in a tokenizer whose ids
// stay in its vocabulary, or in one kvscope::Error (never a crash or another exception).
TEST(TokenizerJsonErrors, SurvivesCorruptedFiles) {
  const std::string original = test::read_text(kFixture);
  std::mt19937 rng(20240611);
  int loaded = 0;
  for (int round = 0; round < 300; ++round) {
    std::string text = original;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng() % text.size();
      switch (rng() % 3) {
        case 0:
          text[at] = static_cast<char>(rng() % 256);
          break;
        case 1:
          text.erase(at, 1 + rng() % 16);
          break;
        default: {
          const std::string piece = text.substr(rng() % text.size(), 1 + rng() % 32);
          text.insert(at, piece);
          break;
        }
      }
      if (text.empty()) text.push_back('{');
    }
    try {
      const auto tok = parse_tokenizer_json(text, "corrupt.json");
      ++loaded;
      for (const char* s : {"Hello, world! 123", "abc bc \xC3\xA9q", "\xFF\xFE x  \n\n"}) {
        for (int id : tok->encode(s, true, true)) {
          ASSERT_TRUE(id >= 0 && id < tok->vocab_size()) << "round " << round;
        }
      }
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(loaded, 0);  // some edits (inside strings, say) leave a loadable file
}

}  // namespace
}  // namespace kvscope

// tokenizer.json against Hugging Face tokenizers itself (tests/data/tokenizer_json_golden.json,
// made by scripts/tokenizer_json_reference.py): id for id and decoded text on small trained files
// and hand-made edge cases, and on SmolLM2's whole vocabulary under five pre-tokenizer setups
// (rebuilt from the GGUF's tokens and merges); agreement with the GGUF tokenizer (llama.cpp's
// ids); both merge forms; BOS, EOS and stop tokens; NFC against Python's unicodedata.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "engine/model/gguf.h"
#include "engine/model/gguf_model.h"
#include "engine/model/pre_tokenizer.h"
#include "engine/model/tokenizer_json.h"
#include "engine/model/unicode_nfc.h"
#include "engine/model/utf8.h"

namespace kvscope {
namespace {

using json = nlohmann::json;

const std::string kSource = KVSCOPE_SOURCE_DIR;
const std::string kGoldenPath = kSource + "/tests/data/tokenizer_json_golden.json";
const std::string kSmolLM2 = kSource + "/assets/models/SmolLM2-135M-Instruct.Q4_1.gguf";

const json& golden() {
  static const json g = [] {
    std::ifstream in(kGoldenPath);
    if (!in) throw Error(kGoldenPath, "missing: run scripts/tokenizer_json_reference.py");
    return json::parse(in);
  }();
  return g;
}

// What Rust's String::from_utf8_lossy makes of bytes (Hugging Face's decode): each maximal
// prefix of a valid sequence that cannot be completed becomes one U+FFFD.
std::string lossy(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    if (std::size_t len = decode_utf8(s, i, cp); len > 0) {
      out += s.substr(i, len);
      i += len;
      continue;
    }
    const auto b0 = static_cast<unsigned char>(s[i]);
    std::size_t need = b0 >= 0xC2 && b0 <= 0xDF   ? 1
                       : b0 >= 0xE0 && b0 <= 0xEF ? 2
                       : b0 >= 0xF0 && b0 <= 0xF4 ? 3
                                                  : 0;
    std::size_t k = 1;
    for (; k <= need && i + k < s.size(); ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      unsigned char lo = 0x80, hi = 0xBF;
      if (k == 1 && b0 == 0xE0) lo = 0xA0;
      if (k == 1 && b0 == 0xED) hi = 0x9F;
      if (k == 1 && b0 == 0xF0) lo = 0x90;
      if (k == 1 && b0 == 0xF4) hi = 0x8F;
      if (b < lo || b > hi) break;
    }
    out += "\xEF\xBF\xBD";
    i += k;
  }
  return out;
}

// Checks `tok` against one golden group: ids for every text, the decoded text, and ids with
// special tokens added (BOS from the template).
void expect_matches(const Tokenizer& tok, const json& group, const std::vector<std::string>& texts,
                    const std::string& name) {
  const json& cases = group.at("cases");
  ASSERT_EQ(cases.size(), texts.size()) << name;
  int matched = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::string& text = texts[i];
    const auto want = cases[i].at("ids").get<std::vector<int>>();
    const std::vector<int> got = tok.encode(text, false, false);
    matched += got == want;
    EXPECT_EQ(got, want) << name << ", text " << i << ": \"" << text << "\"";
    const std::string decoded = cases[i].value("decoded", text);
    EXPECT_EQ(lossy(tok.decode_all(got)), decoded) << name << ", text " << i;
  }
  EXPECT_EQ(matched, static_cast<int>(texts.size())) << name;
  const json& special = group.at("with_special");
  EXPECT_EQ(tok.encode(special.at("text").get<std::string>(), tok.adds_bos(), false),
            special.at("ids").get<std::vector<int>>())
      << name << ": encoding with the special tokens the file adds";
}

std::vector<std::string> texts_of(const json& group, std::size_t count) {
  if (group.contains("texts")) return group.at("texts").get<std::vector<std::string>>();
  auto all = golden().at("texts").get<std::vector<std::string>>();
  all.resize(std::min(all.size(), count));
  return all;
}

TEST(TokenizerJson, MatchesHuggingFaceOnSmallFiles) {
  const json& fixtures = golden().at("fixtures");
  ASSERT_EQ(fixtures.size(), 5u);
  for (const json& f : fixtures) {
    const std::string path = kSource + "/" + f.at("file").get<std::string>();
    const auto tok = load_tokenizer_json(path);
    EXPECT_EQ(tok->path(), path);
    EXPECT_EQ(tok->vocab_size(), f.at("vocab_size").get<int>()) << path;
    expect_matches(*tok, f, texts_of(f, f.at("cases").size()), path);
  }
}

TEST(TokenizerJson, ReadsBosEosAndStopsFromTheFile) {
  const auto llama3 = load_tokenizer_json(kSource + "/tests/data/tokenizer_json/tiny_llama3.json");
  EXPECT_TRUE(llama3->adds_bos());
  EXPECT_EQ(llama3->piece(llama3->bos_id()), "<|begin_of_text|>");
  EXPECT_EQ(llama3->encode("", true, false), std::vector<int>{llama3->bos_id()});
  const int eot = llama3->encode("<|eot_id|>", false, false).at(0);
  const int end = llama3->encode("<|end_of_text|>", false, false).at(0);
  EXPECT_TRUE(llama3->is_stop(eot));
  EXPECT_TRUE(llama3->is_stop(end));
  EXPECT_FALSE(llama3->is_stop(llama3->bos_id()));
  EXPECT_EQ(llama3->decode(-1, eot), "<|eot_id|>");
  // A non-special added token is split out too, and stops nothing.
  const std::vector<int> tool = llama3->encode("a<tool>b", false, false);
  ASSERT_EQ(tool.size(), 3u);
  EXPECT_EQ(llama3->piece(tool[1]), "<tool>");
  EXPECT_FALSE(llama3->is_stop(tool[1]));

  const auto qwen2 =
      load_tokenizer_json(kSource + "/tests/data/tokenizer_json/tiny_qwen2_nfc.json");
  EXPECT_FALSE(qwen2->adds_bos());
  EXPECT_EQ(qwen2->bos_id(), -1);
  EXPECT_EQ(qwen2->encode("x", true, true), qwen2->encode("x", false, false));
  EXPECT_TRUE(qwen2->is_stop(qwen2->encode("<|im_end|>", false, false).at(0)));
  EXPECT_TRUE(qwen2->is_stop(qwen2->encode("<|endoftext|>", false, false).at(0)));
  EXPECT_FALSE(qwen2->is_stop(qwen2->encode("<|im_start|>", false, false).at(0)));
}

TEST(TokenizerJson, RoundTripsTextThroughEveryFile) {
  const std::string text =
      "Mixed: caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD 12345 don't  \n\n\tx <|im_end|> "
      "\xF0\x9F\x98\x80!";
  for (const char* file :
       {"tiny_llama3.json", "tiny_gpt2_legacy_merges.json", "tiny_qwen2_nfc.json"}) {
    const auto tok = load_tokenizer_json(kSource + "/tests/data/tokenizer_json/" + file);
    EXPECT_EQ(tok->decode_all(tok->encode(text, false, false)), text) << file;
    // Invalid UTF-8 (which Hugging Face never sees) still round-trips byte for byte.
    const std::string bad = "a\xC3(b\xFF\xFE\x80z";
    EXPECT_EQ(tok->decode_all(tok->encode(bad, false, false)), bad) << file;
  }
}

TEST(TokenizerJson, PreTokenizersCutWhereHuggingFaceCuts) {
  const std::map<std::string, std::vector<PreSplit>> setups = {
      {"gpt2", {PreSplit::kGpt2}},
      {"llama3", {PreSplit::kLlama3}},
      {"qwen2", {PreSplit::kQwen2}},
      {"digits_gpt2", {PreSplit::kDigits, PreSplit::kGpt2}},
      {"digit_runs_llama3", {PreSplit::kDigitRuns, PreSplit::kLlama3}},
  };
  const auto texts = golden().at("texts").get<std::vector<std::string>>();
  const json& cuts = golden().at("pre_tokenized");
  ASSERT_EQ(cuts.size(), setups.size());
  for (const auto& [name, steps] : setups) {
    const json& want = cuts.at(name);
    ASSERT_EQ(want.size(), texts.size()) << name;
    for (std::size_t i = 0; i < texts.size(); ++i) {
      std::vector<std::size_t> got;
      pre_tokenize(texts[i], steps, [&](std::string_view piece) { got.push_back(piece.size()); });
      EXPECT_EQ(got, want[i].get<std::vector<std::size_t>>())
          << name << ", text " << i << ": \"" << texts[i] << "\"";
    }
  }
}

TEST(TokenizerJson, NfcMatchesPython) {
  const json& cases = golden().at("nfc");
  ASSERT_GE(cases.size(), 5u);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto text = cases[i][0].get<std::string>();
    const auto want = cases[i][1].get<std::string>();
    EXPECT_EQ(nfc(text), want) << "nfc case " << i;
    EXPECT_EQ(nfc(want), want) << "nfc case " << i << " (NFC of NFC)";
  }
  for (const auto& text : golden().at("texts")) {
    EXPECT_EQ(nfc(nfc(text.get<std::string>())), nfc(text.get<std::string>()));
  }
  EXPECT_EQ(nfc("plain ASCII"), "plain ASCII");
  EXPECT_EQ(nfc("e\xCC\x81\xFF"), "\xC3\xA9\xFF");  // an invalid byte is kept
}

TEST(TokenizerJson, PathsEndingInJsonAreTokenizerJson) {
  EXPECT_TRUE(is_tokenizer_json_path("models/qwen/tokenizer.json"));
  EXPECT_FALSE(is_tokenizer_json_path("tok512.bin"));
  EXPECT_FALSE(is_tokenizer_json_path("tokenizer.json.bak"));
}

// ---- SmolLM2's whole vocabulary (the GGUF from scripts/models.sh) ----

struct SmolLM2Vocab {
  std::vector<std::string> tokens;
  std::vector<std::string> merges;
  std::shared_ptr<const Tokenizer> gguf;  // the engine's GGUF tokenizer (llama.cpp's ids)
};

const SmolLM2Vocab& smollm2_vocab() {
  static const SmolLM2Vocab v = [] {
    if (!std::filesystem::exists(kSmolLM2)) {
      throw Error(kSmolLM2, "missing: run scripts/models.sh to download SmolLM2-135M-Instruct");
    }
    const GgufFile file(kSmolLM2);
    SmolLM2Vocab out;
    out.tokens = file.get_string_array("tokenizer.ggml.tokens");
    out.merges = file.get_string_array("tokenizer.ggml.merges");
    out.gguf = load_gguf_tokenizer(file, static_cast<int>(out.tokens.size()));
    return out;
  }();
  return v;
}

// FNV-1a over each item's bytes and a 0 byte (as the reference script computes it).
std::string fnv1a64(const std::vector<std::string>& items) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (const std::string& item : items) {
    for (unsigned char c : item) h = (h ^ c) * 0x100000001B3ull;
    h = h * 0x100000001B3ull;  // the 0 byte: h ^ 0 == h
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// A variant's tokenizer.json: what Hugging Face wrote besides the vocabulary and merges, with the
// GGUF's tokens and merges put back (merges as pairs, or as "left right" strings).
std::string smollm2_json(const json& config, bool string_merges) {
  const SmolLM2Vocab& v = smollm2_vocab();
  json doc = config;
  json vocab = json::object();
  for (std::size_t i = 0; i < v.tokens.size(); ++i) vocab[v.tokens[i]] = i;
  json merges = json::array();
  for (const std::string& m : v.merges) {
    const std::size_t space = m.find(' ');
    merges.push_back(string_merges ? json(m)
                                   : json::array({m.substr(0, space), m.substr(space + 1)}));
  }
  doc["model"]["vocab"] = std::move(vocab);
  doc["model"]["merges"] = std::move(merges);
  return doc.dump();
}

TEST(TokenizerJsonSmolLM2, GoldenIsForThisVocabulary) {
  const SmolLM2Vocab& v = smollm2_vocab();
  const json& want = golden().at("smollm2");
  EXPECT_EQ(v.tokens.size(), want.at("tokens").get<std::size_t>());
  EXPECT_EQ(v.merges.size(), want.at("merges").get<std::size_t>());
  EXPECT_EQ(fnv1a64(v.tokens), want.at("tokens_fnv1a64").get<std::string>())
      << "another SmolLM2 file than the golden's (sha256 "
      << want.at("model_sha256").get<std::string>() << "): rerun the reference script";
  EXPECT_EQ(fnv1a64(v.merges), want.at("merges_fnv1a64").get<std::string>());
}

TEST(TokenizerJsonSmolLM2, MatchesHuggingFaceUnderEveryPreTokenizer) {
  const auto texts = golden().at("texts").get<std::vector<std::string>>();
  const json& variants = golden().at("variants");
  ASSERT_EQ(variants.size(), 5u);
  for (const json& variant : variants) {
    const std::string name = "smollm2 " + variant.at("name").get<std::string>();
    const auto tok = parse_tokenizer_json(smollm2_json(variant.at("config"), false), name);
    EXPECT_EQ(tok->vocab_size(), 49152);
    expect_matches(*tok, variant, texts, name);
  }
}

TEST(TokenizerJsonSmolLM2, ReadsMergesInTheOldStringForm) {
  const auto texts = golden().at("texts").get<std::vector<std::string>>();
  for (const json& variant : golden().at("variants")) {
    const std::string name = "smollm2 " + variant.at("name").get<std::string>() + " (strings)";
    const auto tok = parse_tokenizer_json(smollm2_json(variant.at("config"), true), name);
    expect_matches(*tok, variant, texts, name);
  }
}

TEST(TokenizerJsonSmolLM2, AgreesWithTheGgufTokenizer) {
  const json& smollm2 = golden().at("variants").at(0);
  ASSERT_EQ(smollm2.at("name"), "smollm2");
  const auto tok = parse_tokenizer_json(smollm2_json(smollm2.at("config"), false), "smollm2");
  const Tokenizer& gguf = *smollm2_vocab().gguf;
  for (const auto& text : golden().at("texts")) {
    EXPECT_EQ(tok->encode(text.get<std::string>(), false, false),
              gguf.encode(text.get<std::string>(), false, false))
        << text;
  }
  std::ifstream in("/usr/share/common-licenses/GPL-3", std::ios::binary);
  ASSERT_TRUE(in) << "/usr/share/common-licenses/GPL-3 is missing (package base-files)";
  std::stringstream gpl;
  gpl << in.rdbuf();
  const std::vector<int> ids = tok->encode(gpl.str(), false, false);
  EXPECT_EQ(ids, gguf.encode(gpl.str(), false, false));
  EXPECT_EQ(tok->decode_all(ids), gpl.str());
  for (int id = 0; id < tok->vocab_size(); id += 97) {
    EXPECT_EQ(tok->piece(id), gguf.piece(id));
    EXPECT_EQ(tok->decode(-1, id), gguf.decode(-1, id)) << "token " << id;
  }
  // SmolLM2's tokenizer.json names no BOS (its GGUF's is for chat turns, never added).
  EXPECT_FALSE(tok->adds_bos());
  for (const char* stop : {"<|im_end|>", "<|endoftext|>"}) {
    EXPECT_TRUE(tok->is_stop(tok->encode(stop, false, false).at(0))) << stop;
  }
}

}  // namespace
}  // namespace kvscope

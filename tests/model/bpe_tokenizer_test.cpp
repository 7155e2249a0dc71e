// BpeTokenizer: merge order, the GPT-2 / smollm pre-tokenizers, special tokens, byte fallback and
// round trips on hand-built vocabularies, every validation error, and id-for-id parity with
// llama.cpp on SmolLM2-135M-Instruct's vocabulary (tests/data/smollm2_tokenizer_golden.json).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "engine/model/bpe_tokenizer.h"
#include "engine/model/unicode_class.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

// GPT-2's byte-to-unicode text of raw bytes (written here from its definition, independently of
// the tokenizer's own table).
std::string byte_text(std::string_view raw) {
  std::vector<int> kept;  // bytes that stand for themselves
  for (int b = '!'; b <= '~'; ++b) kept.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) kept.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) kept.push_back(b);
  std::string out;
  for (unsigned char c : raw) {
    int cp = c;
    if (std::find(kept.begin(), kept.end(), c) == kept.end()) {
      int n = 0;
      for (int b = 0; b < c; ++b) n += std::find(kept.begin(), kept.end(), b) == kept.end();
      cp = 256 + n;
    }
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

constexpr int kControl = static_cast<int>(GgmlTokenType::kControl);
constexpr int kUserDefined = static_cast<int>(GgmlTokenType::kUserDefined);

// A small vocabulary: control tokens <|endoftext|> (0), <|im_start|> (1), <|im_end|> (2), the 256
// byte tokens (3..258, in byte order), then one token per merge. `merges` are raw text pairs,
// ranked in order.
BpeVocab small_vocab(const std::vector<std::pair<std::string, std::string>>& merges,
                     const std::string& pre = "smollm") {
  BpeVocab v;
  v.path = "small.gguf";
  v.pre = pre;
  for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    v.tokens.push_back(special);
    v.token_types.push_back(kControl);
  }
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(byte_text(std::string(1, static_cast<char>(b))));
    v.token_types.push_back(1);
  }
  for (const auto& [left, right] : merges) {
    v.merges.push_back(byte_text(left) + " " + byte_text(right));
    std::string merged = byte_text(left + right);
    if (std::find(v.tokens.begin(), v.tokens.end(), merged) == v.tokens.end()) {
      v.tokens.push_back(merged);
      v.token_types.push_back(1);
    }
  }
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  v.extra_stop_ids = {0};
  return v;
}

// Merges that make each of `words` a single token (left to right, words in order), so that
// encoding shows exactly where the pre-tokenizer cut: BPE never merges across pre-tokens.
std::vector<std::pair<std::string, std::string>> whole_word_merges(
    const std::vector<std::string>& words) {
  std::vector<std::pair<std::string, std::string>> merges;
  for (const std::string& w : words) {
    for (std::size_t k = 1; k < w.size(); ++k) merges.emplace_back(w.substr(0, k), w.substr(k, 1));
  }
  return merges;
}

// What each id of `text`'s encoding decodes to.
std::vector<std::string> pieces(const BpeTokenizer& tok, std::string_view text) {
  std::vector<std::string> out;
  for (int id : tok.encode(text, false, false)) out.push_back(tok.decode(-1, id));
  return out;
}

using Pieces = std::vector<std::string>;

TEST(BpeTokenizer, MergesByLowestRankNotByPosition) {
  BpeTokenizer bc_first(small_vocab({{"b", "c"}, {"a", "b"}}));
  EXPECT_EQ(pieces(bc_first, "abc"), (Pieces{"a", "bc"}));
  BpeTokenizer ab_first(small_vocab({{"a", "b"}, {"b", "c"}}));
  EXPECT_EQ(pieces(ab_first, "abc"), (Pieces{"ab", "c"}));
  // Equal ranks: leftmost first.
  BpeTokenizer aa(small_vocab({{"a", "a"}}));
  EXPECT_EQ(pieces(aa, "aaa"), (Pieces{"aa", "a"}));
  EXPECT_EQ(pieces(aa, "aaaa"), (Pieces{"aa", "aa"}));
  // Merged pieces merge again, by their own rank.
  BpeTokenizer chain(small_vocab({{"a", "a"}, {"aa", "aa"}, {"aaaa", "a"}}));
  EXPECT_EQ(pieces(chain, "aaaaa"), (Pieces{"aaaaa"}));
  EXPECT_EQ(pieces(chain, "aaaaaaa"), (Pieces{"aaaa", "aa", "a"}));
}

TEST(BpeTokenizer, NoMergeAppliesAcrossWords) {
  BpeTokenizer tok(small_vocab({{"o", " "}, {"o ", "w"}, {" ", "w"}}));
  EXPECT_EQ(pieces(tok, "o w"), (Pieces{"o", " w"}));
}

TEST(BpeTokenizer, SmollmSplitsEveryDigit) {
  auto merges = whole_word_merges({"12", "123", " 1", "x1", "3.1"});
  BpeTokenizer smollm(small_vocab(merges, "smollm"));
  EXPECT_EQ(pieces(smollm, "123"), (Pieces{"1", "2", "3"}));
  EXPECT_EQ(pieces(smollm, "x1 1"), (Pieces{"x", "1", " ", "1"}));
  EXPECT_EQ(pieces(smollm, "3.14"), (Pieces{"3", ".", "1", "4"}));
  // Non-ASCII numbers too: Arabic-Indic three, superscript two.
  EXPECT_EQ(pieces(smollm, "\xD9\xA3\xC2\xB2").size(), 2u + 2u);
  BpeTokenizer starcoder(small_vocab(merges, "starcoder"));
  EXPECT_EQ(pieces(starcoder, "123"), (Pieces{"1", "2", "3"}));
  // GPT-2 alone keeps digit runs (and their leading space) together.
  BpeTokenizer gpt2(small_vocab(merges, "gpt2"));
  EXPECT_EQ(pieces(gpt2, "123"), (Pieces{"123"}));
  EXPECT_EQ(pieces(gpt2, "x1 1"), (Pieces{"x", "1", " 1"}));
  EXPECT_EQ(pieces(gpt2, "3.14"), (Pieces{"3", ".", "1", "4"}));
}

TEST(BpeTokenizer, WhitespaceRunLeavesItsLastSpaceToTheNextWord) {
  BpeTokenizer tok(small_vocab(
      whole_word_merges({"  ", "   ", "  \n ", "\n\n", "\t\t", " word", "word", " x", " \n\t"})));
  EXPECT_EQ(pieces(tok, "a   word"), (Pieces{"a", "  ", " word"}));
  EXPECT_EQ(pieces(tok, "  \n  x"), (Pieces{"  \n ", " x"}));
  EXPECT_EQ(pieces(tok, "x\n\n\nx"), (Pieces{"x", "\n\n", "\n", "x"}));
  EXPECT_EQ(pieces(tok, "\t\t\tx"), (Pieces{"\t\t", "\t", "x"}));
  // At the end of the text the whole run stays together.
  EXPECT_EQ(pieces(tok, "word   "), (Pieces{"word", "   "}));
  EXPECT_EQ(pieces(tok, "x \n\t"), (Pieces{"x", " \n\t"}));
  // A single whitespace character other than a space does not join the word after it.
  EXPECT_EQ(pieces(tok, "\tx"), (Pieces{"\t", "x"}));
  // Before a digit (its own piece under smollm) a run keeps all its spaces.
  EXPECT_EQ(pieces(tok, "x   1"), (Pieces{"x", "   ", "1"}));
}

TEST(BpeTokenizer, TreatsNonAsciiWhitespaceAsWhitespace) {
  const std::string nbsp = "\xC2\xA0";  // U+00A0 no-break space
  BpeTokenizer tok(small_vocab({{"\xC2", "\xA0"}, {nbsp, nbsp}, {"\x80", "!"}}));
  // Two of them before a word: the run gives its last one back (as punctuation, they would merge).
  EXPECT_EQ(pieces(tok, "x" + nbsp + nbsp + "x"), (Pieces{"x", nbsp, nbsp, "x"}));
  EXPECT_EQ(pieces(tok, "x" + nbsp + nbsp), (Pieces{"x", nbsp + nbsp}));
  // U+3000 ideographic space does not join a following punctuation run (if it did, its last byte
  // would merge with the "!").
  EXPECT_EQ(pieces(tok, "\xE3\x80\x80!"), (Pieces{"\xE3", "\x80", "\x80", "!"}));
}

TEST(BpeTokenizer, SplitsContractionsLikeGpt2) {
  BpeTokenizer tok(small_vocab(whole_word_merges(
      {"don", "'t", "we", "'ll", "'s", "they", "'re", "'ve", "'d", "'m", " '", "''"})));
  EXPECT_EQ(pieces(tok, "don't"), (Pieces{"don", "'t"}));
  EXPECT_EQ(pieces(tok, "we'll"), (Pieces{"we", "'ll"}));
  EXPECT_EQ(pieces(tok, "'s"), (Pieces{"'s"}));
  EXPECT_EQ(pieces(tok, "they're'd'm've"), (Pieces{"they", "'re", "'d", "'m", "'ve"}));
  // Case-sensitive: upper-case suffixes are punctuation then letters.
  EXPECT_EQ(pieces(tok, "I'M"), (Pieces{"I", "'", "M"}));
  // After a space the apostrophe starts a punctuation run.
  EXPECT_EQ(pieces(tok, "x 's"), (Pieces{"x", " '", "s"}));
  EXPECT_EQ(pieces(tok, "''s"), (Pieces{"''", "s"}));
}

TEST(BpeTokenizer, SplitsLettersPunctuationAndOtherScripts) {
  BpeTokenizer tok(
      small_vocab(whole_word_merges({"Hi", "!!!", " ok", " ...", "na\xC3\xAFve", " caf\xC3\xA9",
                                     "\xD0\x96\xD0\xB8", " \xF0\x9F\x98\x80"})));
  EXPECT_EQ(pieces(tok, "Hi!!! ok"), (Pieces{"Hi", "!!!", " ok"}));
  EXPECT_EQ(pieces(tok, "Hi ... ok"), (Pieces{"Hi", " ...", " ok"}));
  EXPECT_EQ(pieces(tok, "na\xC3\xAFve caf\xC3\xA9"), (Pieces{"na\xC3\xAFve", " caf\xC3\xA9"}));
  EXPECT_EQ(pieces(tok, "\xD0\x96\xD0\xB8!"), (Pieces{"\xD0\x96\xD0\xB8", "!"}));
  // An emoji is "other": it joins a preceding space like punctuation does.
  EXPECT_EQ(pieces(tok, "Hi \xF0\x9F\x98\x80"), (Pieces{"Hi", " \xF0\x9F\x98\x80"}));
}

TEST(BpeTokenizer, ClassifiesCodePoints) {
  EXPECT_EQ(char_class(U'a'), CharClass::kLetter);
  EXPECT_EQ(char_class(U'\u00E9'), CharClass::kLetter);  // é
  EXPECT_EQ(char_class(U'\u0416'), CharClass::kLetter);  // Ж
  EXPECT_EQ(char_class(U'\u4E2D'), CharClass::kLetter);  // 中
  EXPECT_EQ(char_class(U'\u02B0'), CharClass::kLetter);  // modifier letter (Lm)
  EXPECT_EQ(char_class(U'7'), CharClass::kNumber);
  EXPECT_EQ(char_class(U'\u0663'), CharClass::kNumber);  // Arabic-Indic three (Nd)
  EXPECT_EQ(char_class(U'\u216B'), CharClass::kNumber);  // Roman numeral twelve (Nl)
  EXPECT_EQ(char_class(U'\u00BD'), CharClass::kNumber);  // one half (No)
  EXPECT_EQ(char_class(U' '), CharClass::kWhitespace);
  EXPECT_EQ(char_class(U'\r'), CharClass::kWhitespace);
  EXPECT_EQ(char_class(U'\u0085'), CharClass::kWhitespace);
  EXPECT_EQ(char_class(U'\u3000'), CharClass::kWhitespace);
  EXPECT_EQ(char_class(U'\u001C'), CharClass::kOther);  // str.isspace() says yes, \s says no
  EXPECT_EQ(char_class(U'\u0301'), CharClass::kOther);  // combining acute (Mn)
  EXPECT_EQ(char_class(U'!'), CharClass::kOther);
  EXPECT_EQ(char_class(U'\U0001F600'), CharClass::kOther);
  EXPECT_EQ(char_class(char32_t{0xD800}), CharClass::kOther);
  EXPECT_EQ(char_class(char32_t{0x110000}), CharClass::kOther);
}

TEST(BpeTokenizer, SplitsOutSpecialTokensFirst) {
  BpeVocab v = small_vocab(whole_word_merges({"user", "<|", "|>", "_start"}));
  v.tokens.push_back("<tool>");  // user-defined tokens are split out too
  v.token_types.push_back(kUserDefined);
  v.tokens.push_back("<tool><call>");  // ... the longest match first
  v.token_types.push_back(kUserDefined);
  const int tool = static_cast<int>(v.tokens.size()) - 2;
  const int tool_call = tool + 1;
  BpeTokenizer tok(v);
  std::vector<int> ids = tok.encode("<|im_start|>user\n<|im_end|>", false, false);
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(tok.decode(-1, ids[1]), "user");
  EXPECT_EQ(tok.decode(-1, ids[2]), "\n");
  EXPECT_EQ(ids[3], 2);
  EXPECT_EQ(tok.encode("<tool><call><tool>", false, false), (std::vector<int>{tool_call, tool}));
  // Special tokens split the text between them: no space joins the word after one.
  EXPECT_EQ(pieces(tok, "<|im_end|> user"), (Pieces{"<|im_end|>", " ", "user"}));
  // Incomplete special texts are plain text.
  EXPECT_EQ(pieces(tok, "<|im_start|"),
            (Pieces{"<|", "i", "m", "_", "s", "t", "a", "r", "t", "|"}));
  EXPECT_EQ(tok.decode_all(tok.encode("<|im_start|<|im_end|>>", false, false)),
            "<|im_start|<|im_end|>>");
  EXPECT_EQ(tok.encode("<|im_start|<|im_end|>>", false, false).back(),
            tok.encode(">", false, false)[0]);
}

TEST(BpeTokenizer, FallsBackToByteTokens) {
  BpeTokenizer tok(small_vocab({{"c", "a"}}));
  // é has no merge: its two UTF-8 bytes stay two byte tokens.
  std::vector<int> ids = tok.encode("\xC3\xA9", false, false);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], 3 + 0xC3);
  EXPECT_EQ(ids[1], 3 + 0xA9);
  EXPECT_EQ(tok.piece(ids[0]), "\xC3\x83");  // Ã, the byte-to-unicode text of 0xC3
  EXPECT_EQ(tok.decode(-1, ids[0]), "\xC3");
  EXPECT_EQ(tok.decode_all(ids), "\xC3\xA9");
  // A byte without a token is left out (as llama.cpp does; unk_id is not used).
  BpeVocab v = small_vocab({});
  v.tokens[3 + 'q'] = "<unused>";
  v.token_types[3 + 'q'] = 5;
  BpeTokenizer no_q(v);
  EXPECT_EQ(no_q.encode("aqa", false, false), (std::vector<int>{3 + 'a', 3 + 'a'}));
  EXPECT_EQ(no_q.encode("q", false, false), (std::vector<int>{}));
  v.unk_id = -1;
  EXPECT_NO_THROW(BpeTokenizer{v});
}

TEST(BpeTokenizer, RoundTripsArbitraryBytes) {
  BpeTokenizer tok(small_vocab(whole_word_merges({" the", "ing", "\xC3\xA9t\xC3\xA9", "  "})));
  std::vector<std::string> texts = {"",
                                    "\xC3",
                                    "\xFF\xFE",
                                    "\xED\xA0\x80",
                                    "\xC0\xAF",
                                    "\xF4\x90\x80\x80",
                                    "\xE2\x82",
                                    "a\x80"
                                    "b",
                                    "\xF0\x9F\x98",
                                    " \xC3 x",
                                    "'\xE9s",
                                    std::string("\0\0 \0x", 5),
                                    "\xC3\xA9t\xC3\xA9 the thing\xC3"};
  std::mt19937 rng(20241123);
  for (int i = 0; i < 400; ++i) {
    std::string s(rng() % 40, '\0');
    // Mostly bytes that matter to the pre-tokenizer, some of everything.
    const char alphabet[] = " \t\n'sa1\xC3\xA9\x80\xFF!<|>";
    for (char& c : s) {
      c = rng() % 4 == 0 ? static_cast<char>(rng() % 256) : alphabet[rng() % (sizeof alphabet - 1)];
    }
    texts.push_back(s);
  }
  for (const std::string& text : texts) {
    std::vector<int> ids = tok.encode(text, false, false);
    EXPECT_EQ(tok.decode_all(ids), text);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 0), 0) << "unk in the encoding";
  }
}

TEST(BpeTokenizer, AddsBosAndEosWhenAsked) {
  BpeTokenizer tok(small_vocab({}));
  EXPECT_EQ(tok.encode("a", true, true), (std::vector<int>{1, 3 + 'a', 2}));
  EXPECT_EQ(tok.encode("", true, false), (std::vector<int>{1}));
  EXPECT_EQ(tok.encode("", false, false), (std::vector<int>{}));
  BpeVocab v = small_vocab({});
  v.bos_id = -1;
  BpeTokenizer no_bos(v);
  EXPECT_EQ(no_bos.bos_id(), -1);
  EXPECT_EQ(no_bos.encode("a", true, true), (std::vector<int>{3 + 'a', 2}));
}

TEST(BpeTokenizer, DecodesSpecialTokensToTheirTextAndKnowsStops) {
  BpeTokenizer tok(small_vocab({}));
  EXPECT_EQ(tok.vocab_size(), 3 + 256);
  EXPECT_EQ(tok.path(), "small.gguf");
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.decode(-1, 2), "<|im_end|>");
  EXPECT_EQ(tok.decode_all({1, 3 + 'h', 3 + ' ', 2}), "<|im_start|>h <|im_end|>");
  EXPECT_EQ(tok.piece(3 + ' '), "\xC4\xA0");  // Ġ
  EXPECT_EQ(tok.decode(-1, 3 + ' '), " ");
  EXPECT_TRUE(tok.is_stop(2));
  EXPECT_TRUE(tok.is_stop(0));
  EXPECT_FALSE(tok.is_stop(1));
  EXPECT_THROW(tok.decode(-1, 3 + 256), Error);
  EXPECT_THROW(tok.piece(-1), Error);
}

// The message a vocabulary fails with ("" when it loads).
std::string error_of(BpeVocab v) {
  try {
    BpeTokenizer tok(std::move(v));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(BpeTokenizer, RejectsMalformedVocabularies) {
  BpeVocab empty;
  empty.path = "e.gguf";
  empty.pre = "gpt2";
  EXPECT_EQ(error_of(empty),
            "e.gguf: tokenizer.ggml.tokens: expected at least one token, got none");

  BpeVocab dup = small_vocab({});
  dup.tokens[5] = dup.tokens[4];
  EXPECT_EQ(error_of(dup),
            "small.gguf: tokenizer.ggml.tokens[5]: expected a token text not used before, got "
            "\"\xC4\x81\", the text of token 4");

  BpeVocab no_space = small_vocab({{"a", "b"}});
  no_space.merges.push_back("ab");
  EXPECT_EQ(error_of(no_space),
            "small.gguf: tokenizer.ggml.merges[1]: expected \"left right\" (two pieces and one "
            "space), got \"ab\"");
  BpeVocab two_spaces = small_vocab({});
  two_spaces.merges = {"a b c"};
  EXPECT_EQ(error_of(two_spaces),
            "small.gguf: tokenizer.ggml.merges[0]: expected \"left right\" (two pieces and one "
            "space), got \"a b c\"");

  BpeVocab unknown_piece = small_vocab({{"a", "b"}});
  unknown_piece.merges.push_back("ab zz");
  EXPECT_EQ(error_of(unknown_piece),
            "small.gguf: tokenizer.ggml.merges[1]: expected a merge of two tokens, got \"ab zz\" "
            "(\"zz\" is not a token)");

  BpeVocab no_result = small_vocab({});
  no_result.merges = {"x y"};
  EXPECT_EQ(error_of(no_result),
            "small.gguf: tokenizer.ggml.merges[0]: expected a merge whose result is a token, got "
            "\"x y\" (\"xy\" is not a token)");

  BpeVocab bad_bos = small_vocab({});
  bad_bos.bos_id = 259;
  EXPECT_EQ(error_of(bad_bos),
            "small.gguf: tokenizer.ggml.bos_token_id: expected -1 (none) or a token id in [0, "
            "259), got 259");
  BpeVocab bad_eos = small_vocab({});
  bad_eos.eos_id = -2;
  EXPECT_EQ(error_of(bad_eos),
            "small.gguf: tokenizer.ggml.eos_token_id: expected -1 (none) or a token id in [0, "
            "259), got -2");
  BpeVocab bad_unk = small_vocab({});
  bad_unk.unk_id = 1000;
  EXPECT_EQ(error_of(bad_unk),
            "small.gguf: tokenizer.ggml.unknown_token_id: expected -1 (none) or a token id in [0, "
            "259), got 1000");
  BpeVocab bad_stop = small_vocab({});
  bad_stop.extra_stop_ids = {0, -1};
  EXPECT_EQ(error_of(bad_stop),
            "small.gguf: stop token ids[1]: expected a token id in [0, 259), got -1");

  BpeVocab short_types = small_vocab({});
  short_types.token_types.pop_back();
  EXPECT_EQ(error_of(short_types),
            "small.gguf: tokenizer.ggml.token_type: expected 259 entries (one per token), got 258");
  BpeVocab bad_type = small_vocab({});
  bad_type.token_types[7] = 9;
  EXPECT_EQ(
      error_of(bad_type),
      "small.gguf: tokenizer.ggml.token_type[7]: expected a ggml token type in [0, 6], got 9");

  BpeVocab llama3 = small_vocab({});
  llama3.pre = "llama-bpe";
  EXPECT_EQ(error_of(llama3),
            "small.gguf: tokenizer.ggml.pre: expected a supported pre-tokenizer (smollm, "
            "starcoder, gpt2), got \"llama-bpe\"");

  // Long and control-character values are escaped and cut.
  BpeVocab long_merge = small_vocab({});
  long_merge.merges = {std::string(60, 'x') + "\n"};
  EXPECT_EQ(error_of(long_merge),
            "small.gguf: tokenizer.ggml.merges[0]: expected \"left right\" (two pieces and one "
            "space), got \"" +
                std::string(48, 'x') + "\"...");
  EXPECT_EQ(error_of(small_vocab({{"a", "b"}})), "");
}

// ---- Parity with llama.cpp on SmolLM2-135M-Instruct ----

const std::string kModelPath =
    std::string(KVSCOPE_SOURCE_DIR) + "/assets/models/SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kGoldenPath =
    std::string(KVSCOPE_SOURCE_DIR) + "/tests/data/smollm2_tokenizer_golden.json";

// SmolLM2's tokenizer as the engine loads it (engine/model/gguf.h + gguf_tokenizer.cpp).
const Tokenizer& smollm2_tokenizer() {
  return *test::smollm2().tokenizer;
}

// The bytes SmolLM2's vocabulary has no token for (found with gguf's GGUFReader): encoding leaves
// them out, like llama.cpp, so the text decodes back without them.
bool smollm2_has_no_token_for(unsigned char b) {
  return b == 0x04 || b == 0x06 || b == 0x13 || b == 0x14 || b == 0x16 || b == 0x1D || b == 0xC0 ||
         b == 0xC1 || b == 0xF1 || b == 0xF2 || b >= 0xF5;
}

std::string model_missing_message() {
  return kModelPath + " is missing: run scripts/models.sh to download SmolLM2-135M-Instruct";
}

TEST(BpeTokenizerSmolLM2, ReadsTheVocabulary) {
  ASSERT_TRUE(std::filesystem::exists(kModelPath)) << model_missing_message();
  const Tokenizer& tok = smollm2_tokenizer();
  EXPECT_EQ(tok.vocab_size(), 49152);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.piece(1), "<|im_start|>");
  EXPECT_EQ(tok.piece(2), "<|im_end|>");
  EXPECT_TRUE(tok.is_stop(2));
  EXPECT_TRUE(tok.is_stop(0));  // <|endoftext|>
  EXPECT_FALSE(tok.is_stop(1));
  for (int b = 0; b < 256; ++b) {
    std::vector<int> ids = tok.encode(std::string(1, static_cast<char>(b)), false, false);
    EXPECT_EQ(ids.size(), smollm2_has_no_token_for(static_cast<unsigned char>(b)) ? 0u : 1u)
        << "byte " << b;
  }
}

TEST(BpeTokenizerSmolLM2, MatchesLlamaCppIdForId) {
  ASSERT_TRUE(std::filesystem::exists(kModelPath)) << model_missing_message();
  const Tokenizer& tok = smollm2_tokenizer();
  std::ifstream in(kGoldenPath);
  ASSERT_TRUE(in) << kGoldenPath << " is missing: run scripts/smollm2_tokenizer_reference.py";
  nlohmann::json golden = nlohmann::json::parse(in);
  const auto& cases = golden.at("cases");
  ASSERT_GE(cases.size(), 50u);
  int matched = 0;
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const std::vector<int> want = c.at("ids").get<std::vector<int>>();
    const std::vector<int> got = tok.encode(text, false, false);
    if (got == want) ++matched;
    EXPECT_EQ(got, want) << "text: \"" << text << "\" (golden from model sha256 "
                         << golden.at("model_sha256").get<std::string>()
                         << "; a different model file needs new goldens)";
    std::string kept;  // the text without the bytes SmolLM2 has no token for
    for (char ch : text) {
      if (!smollm2_has_no_token_for(static_cast<unsigned char>(ch))) kept += ch;
    }
    EXPECT_EQ(tok.decode_all(got), kept);
  }
  EXPECT_EQ(matched, static_cast<int>(cases.size()));
}

TEST(BpeTokenizerSmolLM2, RoundTripsGpl3) {
  ASSERT_TRUE(std::filesystem::exists(kModelPath)) << model_missing_message();
  const Tokenizer& tok = smollm2_tokenizer();
  std::ifstream in("/usr/share/common-licenses/GPL-3", std::ios::binary);
  ASSERT_TRUE(in) << "/usr/share/common-licenses/GPL-3 is missing (package base-files)";
  std::stringstream text;
  text << in.rdbuf();
  std::vector<int> ids = tok.encode(text.str(), false, false);
  EXPECT_EQ(tok.decode_all(ids), text.str());
  // Each merge makes one token of two pieces: English prose averages well over 3 bytes a token.
  EXPECT_GT(text.str().size(), 3 * ids.size());
}

}  // namespace
}  // namespace kvscope

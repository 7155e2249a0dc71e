// Tokenizer: round trips, byte fallback, BOS rule, and the vocabulary-mismatch error.
#include <gtest/gtest.h>

#include "engine/common/error.h"
#include "engine/model/tokenizer.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

const Tokenizer& tok() {
  return *test::real_model().tokenizer;
}

TEST(Tokenizer, RoundTripsAscii) {
  for (std::string text : {"Once upon a time, there was a little girl named Lily.",
                           "Hello world!\nNew line\tand tab", "  leading spaces", "x", "!!??"}) {
    auto ids = tok().encode(text, true, false);
    EXPECT_EQ(ids[0], kTokenBos);
    EXPECT_EQ(tok().decode_all(ids), text);
  }
}

TEST(Tokenizer, RoundTripsUtf8ThroughByteFallback) {
  const std::string text = "caf\xC3\xA9 \xE2\x98\x83 \xF0\x9F\x98\x80 na\xC3\xAFve";
  auto ids = tok().encode(text, true, false);
  EXPECT_EQ(tok().decode_all(ids), text);
  // The snowman is not in a 512-token vocabulary: it must appear as its three byte tokens.
  auto snowman = tok().encode("\xE2\x98\x83", false, false);
  EXPECT_GE(snowman.size(), 3u);
}

TEST(Tokenizer, EmptyInput) {
  auto ids = tok().encode("", true, false);
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(ids[0], kTokenBos);
  EXPECT_EQ(tok().decode_all(ids), "");
  EXPECT_TRUE(tok().encode("", false, false).empty());
  auto with_eos = tok().encode("", true, true);
  EXPECT_EQ(with_eos.back(), kTokenEos);
}

TEST(Tokenizer, MergesIntoFewerTokensThanBytes) {
  const std::string text = "Once upon a time there was a little dog.";
  EXPECT_LT(tok().encode(text, false, false).size(), text.size() / 2);
}

TEST(Tokenizer, LeadingSpaceDroppedOnlyAfterBos) {
  auto ids = tok().encode("Once", true, false);
  ASSERT_GE(ids.size(), 2u);
  const std::string& raw = tok().piece(ids[1]);
  EXPECT_EQ(raw[0], ' ');
  EXPECT_EQ(tok().decode(kTokenBos, ids[1])[0], 'O');
  EXPECT_EQ(tok().decode(ids[1], ids[1])[0], ' ');
}

TEST(Tokenizer, WrongVocabularySizeIsClear) {
  const std::string path = test::real_model().tokenizer->path();
  try {
    Llama2cTokenizer t(path, 32000);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("32000"), std::string::npos) << msg;
    EXPECT_NE(msg.find("got 512"), std::string::npos) << msg;
  }
}

TEST(Tokenizer, TruncatedTokenizerIsClear) {
  auto bytes = test::read_bytes(test::real_model().tokenizer->path());
  bytes.resize(bytes.size() - 3);
  const std::string p = test::temp_path("tok_trunc.bin");
  test::write_bytes(p, bytes);
  try {
    Llama2cTokenizer t(p, 512);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("end of file"), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, ModelFileAsTokenizerIsRejected) {
  EXPECT_THROW(Llama2cTokenizer(test::real_model().model->source(), 512), Error);
}

}  // namespace
}  // namespace kvscope

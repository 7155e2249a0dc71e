// Replays fuzz_tokenizer findings: a 7-token tokenizer made encode() index byte-fallback ids
// (byte + 3) past the vocabulary (heap-buffer-overflow); now such a file is rejected on load.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/model/tokenizer.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

// The tokenizer.bin part of crash-007328e7 (after the harness's 4-byte prefix and "ab ba"):
// max_token_length 5, then <unk>, <s>, </s>, " ", "a", "\xc0", "ab".
const std::vector<unsigned char> kSmallTokenizer = {
    0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x3c, 0x75, 0x6e, 0x6b,
    0x3e, 0x00, 0x00, 0x80, 0xbf, 0x03, 0x00, 0x00, 0x00, 0x3c, 0x73, 0x3e, 0x00, 0x00, 0x00, 0xc0,
    0x04, 0x00, 0x00, 0x00, 0x3c, 0x2f, 0x73, 0x3e, 0x00, 0x00, 0x40, 0xc0, 0x01, 0x00, 0x00, 0x00,
    0x20, 0x00, 0x00, 0x80, 0xc0, 0x01, 0x00, 0x00, 0x00, 0x61, 0x00, 0x00, 0xa0, 0xc0, 0x01, 0x00,
    0x00, 0x00, 0xc0, 0x00, 0x00, 0x62, 0xc0, 0x02, 0x00, 0x00, 0x00, 0x61, 0x62};

TEST(FuzzRegression, TokenizerWithoutByteTokensIsRejected) {
  const std::string path = test::temp_path("fuzz_small_tokenizer.bin");
  test::write_bytes(path, std::vector<char>(kSmallTokenizer.begin(), kSmallTokenizer.end()));
  try {
    Llama2cTokenizer tok(path, 7);
    (void)tok.encode("ab ba", true, false);  // overflowed here before the fix
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("at least 259 tokens"), std::string::npos) << msg;
    EXPECT_NE(msg.find("got 7 tokens"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace kvscope

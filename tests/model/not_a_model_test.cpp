// Files that are no model (text, other binaries, a tokenizer) are refused in one line that says so
// and what they look like, while a damaged checkpoint keeps its field-level error (#39).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/model/checkpoint.h"
#include "engine/model/locate.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

using test::read_bytes;
using test::temp_path;
using test::write_bytes;

std::string load_error(const std::string& path) {
  try {
    load_model(path, "");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<char> chars(const std::string& s) {
  return {s.begin(), s.end()};
}

TEST(NotAModel, TextFileSaysSoAndShowsItsStart) {
  const std::string p = temp_path("passwd");
  write_bytes(p, chars("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/:/sbin/nologin\n"));
  EXPECT_EQ(load_error(p),
            p + ": not a GGUF or llama2.c checkpoint (its first bytes are 'root:x:0:0:root:', a "
                "text file; no \"GGUF\" or \"ak42\" magic, and as a llama2.c v0 header 7 of its 7 "
                "numbers are outside any model's shape, e.g. dim = 1953460082)");
  // model_config_for (kvscope info's shape) reads the same header.
  try {
    model_config_for(p, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a GGUF or llama2.c checkpoint"), std::string::npos);
  }
}

TEST(NotAModel, NewlinesInTheStartAreEscaped) {
  const std::string p = temp_path("short_lines.txt");
  write_bytes(p, chars("a\nb\tc\nddddddddddddddddddddddddddddddddddd\n"));
  EXPECT_NE(load_error(p).find("its first bytes are 'a\\nb\\tc\\ndddddddddd', a text file"),
            std::string::npos)
      << load_error(p);
}

TEST(NotAModel, BinaryFileShowsHex) {
  const std::string p = temp_path("random.bin");
  std::vector<char> bytes(64);
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>((i * 151 + 0x9f) & 0xff);
  write_bytes(p, bytes);
  const std::string err = load_error(p);
  EXPECT_NE(err.find(": not a GGUF or llama2.c checkpoint (its first bytes are 9f 36 cd 64 fb 92 "
                     "29 c0 (hex), not text; no \"GGUF\" or \"ak42\" magic"),
            std::string::npos)
      << err;
}

TEST(NotAModel, TinyFile) {
  const std::string p = temp_path("tiny.txt");
  write_bytes(p, chars("abc"));
  EXPECT_EQ(load_error(p), p + ": not a GGUF or llama2.c checkpoint (its first bytes are 'abc', a "
                               "text file; 3 bytes, shorter than a GGUF header or a 28-byte "
                               "llama2.c header)");
}

TEST(NotAModel, TokenizerGivenAsTheModel) {
  // A llama2.c tokenizer starts with its longest token's length, then (score, length, bytes)
  // per token: a small number, then floats and text read as a header.
  const std::string p = temp_path("tok.bin");
  std::string bytes;
  auto put = [&](const auto& v) { bytes.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(std::int32_t{7});
  for (const std::string token : {"<unk>", "<s>", "</s>", "hello", "world"}) {
    put(-1.5f);
    put(static_cast<std::int32_t>(token.size()));
    bytes += token;
  }
  write_bytes(p, chars(bytes));
  EXPECT_NE(load_error(p).find(": not a GGUF or llama2.c checkpoint ("), std::string::npos)
      << load_error(p);
}

TEST(NotAModel, DamagedCheckpointKeepsTheFieldError) {
  // One bad field in a real checkpoint's header is a damaged checkpoint, not "no model".
  auto bytes = read_bytes(test::real_model().model->source());
  const std::int32_t zero_seq_len = 0;
  std::memcpy(bytes.data() + 24, &zero_seq_len, 4);
  const std::string p = temp_path("zero_seq_len.bin");
  write_bytes(p, bytes);
  const std::string err = load_error(p);
  EXPECT_NE(err.find("header.seq_len: expected an integer in [1, 16777216], got 0"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("not a GGUF"), std::string::npos) << err;
}

}  // namespace
}  // namespace kvscope

// libFuzzer target: tokenizer.bin loading, then encode/decode of fuzzed text with it.
// Input: uint16 expected vocab size, uint8 flags (bit 0 BOS, bit 1 EOS), uint8 text length n,
// n bytes of text, then the tokenizer file. Bad files must end in kvscope::Error; for a loaded
// tokenizer, every encoded id must be in the vocabulary and decoding must not throw.
#include <cstdint>
#include <cstring>
#include <string_view>

#include "engine/common/error.h"
#include "engine/model/tokenizer.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static kvscope::fuzz::ScratchFile file("tokenizer");
  if (size < 4) return 0;
  std::uint16_t vocab;
  std::memcpy(&vocab, data, 2);
  const bool bos = (data[2] & 1) != 0;
  const bool eos = (data[2] & 2) != 0;
  const std::size_t text_len = data[3];
  if (size < 4 + text_len) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 4), text_len);
  const std::string& path = file.write(data + 4 + text_len, size - 4 - text_len);
  try {
    kvscope::Llama2cTokenizer tok(path, vocab);
    kvscope::fuzz::check(tok.vocab_size() == vocab, "vocab size as expected");
    const std::vector<int> ids = tok.encode(text, bos, eos);
    for (int id : ids) kvscope::fuzz::check(id >= 0 && id < tok.vocab_size(), "id in vocabulary");
    (void)tok.decode_all(ids);
  } catch (const kvscope::Error&) {
    return 0;
  }
  return 0;
}

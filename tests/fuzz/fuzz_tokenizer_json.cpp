// libFuzzer target: a Hugging Face tokenizer.json read from a file (the whole input), then a few
// texts encoded and decoded with it: fixed ones that reach every pre-tokenizer rule, added tokens,
// NFC and invalid UTF-8, and the input's own first bytes. Bad files must end in kvscope::Error;
// for a loaded tokenizer every id must be in the vocabulary and decoding must not throw.
#include <cstdint>
#include <string_view>

#include "engine/common/error.h"
#include "engine/model/tokenizer_json.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static kvscope::fuzz::ScratchFile file("tokenizer_json");
  const std::string& path = file.write(data, size);
  try {
    const auto tok = kvscope::load_tokenizer_json(path);
    kvscope::fuzz::check(tok->vocab_size() > 0, "a non-empty vocabulary");
    const std::string_view own(reinterpret_cast<const char*>(data), size < 256 ? size : 256);
    for (std::string_view text :
         {std::string_view("Hello, world! don't 'LL 12345 \xD9\xA3\xC2\xB2 x1y22"),
          std::string_view("  \n\n\t x\r\n<|endoftext|><|im_start|>a<|eot_id|>  "),
          std::string_view("e\xCC\x81 \xEA\xB0\x80\xE1\x86\xA8 \xF0\x9F\x98\x80 \xC3(\xFF\xFE"),
          own}) {
      for (int id : tok->encode(text, true, true)) {
        kvscope::fuzz::check(id >= 0 && id < tok->vocab_size(), "id in vocabulary");
        (void)tok->decode(-1, id);
      }
      (void)tok->decode_all(tok->encode(text, false, false));
    }
    if (tok->bos_id() >= 0) {
      kvscope::fuzz::check(tok->bos_id() < tok->vocab_size(), "BOS in vocabulary");
    }
  } catch (const kvscope::Error&) {
    return 0;
  }
  return 0;
}

// kvscope tokenize: the ids and pieces a model's tokenizer makes of a text, as a table or JSON.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "engine/common/error.h"
#include "engine/common/text_lines.h"
#include "engine/model/locate.h"
#include "engine/model/tokenizer_json.h"

namespace kvscope::cli {

namespace {
constexpr const char* kHelp =
    R"(usage: kvscope tokenize [--model PATH|NAME] (--text TEXT | --file PATH) [options]
       kvscope tokenize --tokenizer tokenizer.json (--text TEXT | --file PATH) [options]

prints one line per token: its position, id and the bytes it stands for (escaped).
  --model PATH|NAME     model whose tokenizer to use (default stories260K; smollm2, a GGUF, ...)
  --tokenizer PATH      a Hugging Face tokenizer.json (byte-level BPE: GPT-2, SmolLM2, Qwen2/2.5,
                        Llama-3; what vLLM and SGLang tokenize with), used alone without --model;
                        or, for llama2.c models, their tokenizer.bin (default found beside it)
  --text TEXT           the text to tokenize
  --file PATH           read the text from a file instead
  --bos                 put the model's BOS token first
  --json                print {"ids": [...], "pieces": [...]} instead (pieces are the decoded
                        bytes of each token; invalid UTF-8 is replaced by U+FFFD)
special tokens written in the text (<|im_start|>, ...) become their single id.
)";

// The piece with control bytes escaped, for one line of the table.
std::string escaped(const std::string& s) {
  std::string out;
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '\n')
      out += "\\n";
    else if (ch == '\t')
      out += "\\t";
    else if (ch == '\\')
      out += "\\\\";
    else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}
}  // namespace

int cmd_tokenize(const Argv& argv) {
  Args args(argv, {"--model", "--tokenizer", "--text", "--file"}, {"--help", "--bos", "--json"});
  if (args.has("--help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (!args.positional().empty())
    throw Error(args.positional()[0], "unexpected argument; see --help");
  if (args.has("--text") == args.has("--file")) {
    throw Error("--text", "expected exactly one of --text TEXT or --file PATH, got " +
                              std::string(args.has("--text") ? "both" : "neither"));
  }
  const std::string text =
      args.has("--text") ? args.get("--text")
                         : read_text_file(args.get("--file"), "cannot open the text file (--file)");
  // A tokenizer.json alone needs no model; otherwise the model brings or finds its tokenizer.
  std::shared_ptr<const Tokenizer> tokenizer;
  if (!args.has("--model") && is_tokenizer_json_path(args.get("--tokenizer"))) {
    tokenizer = load_tokenizer_json(args.get("--tokenizer"));
  } else {
    const LoadedModel loaded = load_model_flags(args);
    if (!loaded.tokenizer) {
      throw Error(loaded.model->source(), "no tokenizer with " +
                                              std::to_string(loaded.model->config().vocab_size) +
                                              " tokens found; pass --tokenizer PATH");
    }
    tokenizer = loaded.tokenizer;
  }
  const Tokenizer& tok = *tokenizer;
  const std::vector<int> ids = tok.encode(text, args.has("--bos"), /*eos=*/false);
  std::vector<std::string> pieces;
  int prev = -1;
  for (int id : ids) {
    pieces.push_back(tok.decode(prev, id));
    prev = id;
  }
  if (args.has("--json")) {
    nlohmann::json j;
    j["ids"] = ids;
    j["pieces"] = pieces;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  for (std::size_t i = 0; i < ids.size(); ++i) {
    std::printf("%6zu %7d  %s\n", i, ids[i], escaped(pieces[i]).c_str());
  }
  std::fprintf(stderr, "%zu tokens, %zu bytes (%s)\n", ids.size(), text.size(), tok.path().c_str());
  return 0;
}

}  // namespace kvscope::cli

// kvscope lookup: "why did my prefix miss?" against a finished attach. Rebuilds the engine's
// prefix cache as attach saw it from its journal (stream.kvj) and walks the prompt's blocks
// down it, per rank, medium and KV cache group. See docs/attach.md, "Why did my prefix miss?".
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "engine/common/error.h"
#include "engine/common/setting_source.h"
#include "engine/model/prompt_file.h"
#include "engine/trace/kv_journal.h"
#include "present/attach_report.h"

namespace kvscope::cli {
namespace {

constexpr const char* kHelp =
    R"(usage: kvscope lookup SOURCE (--prompt FILE | --text TEXT) [options]

says how many leading blocks of a prompt the engine held when `kvscope attach` ended, per
data-parallel rank, medium and KV cache group, where the match stops and why: never stored,
stored then removed (in which batch, how long before the end), held under another LoRA or extra
keys, its chain begun before attach, or a prompt shorter than one block. Matching compares the
token ids the stream carried, block by block along the parent chain (not the engine's hash).
  SOURCE              an attach output directory (its stream.kvj), a stream.kvj, or the
                      recording.kvr beside one
  --prompt FILE       token ids (a JSON array, or the engine's /tokenize answer) or UTF-8 text
  --text TEXT         the prompt as text
  --tokenizer PATH    the engine's tokenizer for text: tokenizer.json or a GGUF file
  --model NAME|PATH   or a model whose tokenizer to use (smollm2, a GGUF, ...)
  --bos               put the tokenizer's BOS first even when its convention does not
  --lora NAME         the LoRA adapter the request runs with (default: none)
  --clear-scope S     what AllBlocksCleared dropped: gpu, all or auto (default auto; see
                      `kvscope attach --help`)
  --json              print the rows as JSON
exit status: 0 done, 2 bad input.
)";

// SOURCE as a journal path: DIR/stream.kvj, the file itself, or the stream.kvj beside a .kvr.
std::string journal_of(const std::string& source) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(source, ec)) return (fs::path(source) / "stream.kvj").string();
  if (fs::path(source).extension() == ".kvr") {
    const fs::path beside = fs::path(source).parent_path() / "stream.kvj";
    if (!fs::exists(beside, ec)) {
      throw Error(source,
                  "a recording keeps no token ids; expected stream.kvj beside it "
                  "(written by kvscope attach), found none");
    }
    return beside.string();
  }
  return source;
}

}  // namespace

int cmd_lookup(const Argv& argv) {
  if (argv.empty()) {
    std::fputs(kHelp, stderr);
    return kExitBadInput;
  }
  const Args args(argv, {"--prompt", "--text", "--tokenizer", "--model", "--lora", "--clear-scope"},
                  {"--json", "--bos", "--help"});
  if (args.has("--help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (args.positional().size() != 1) {
    throw Error("lookup",
                "expected one SOURCE (an attach output directory or its stream.kvj), "
                "got " +
                    std::to_string(args.positional().size()) + "; see --help");
  }
  if (args.has("--prompt") == args.has("--text"))
    throw Error("lookup", "expected one of --prompt FILE or --text TEXT; see --help");
  const KvClearScope scope =
      parse_kv_clear_scope(args.get("--clear-scope", "auto"), "--clear-scope");
  const std::vector<std::int64_t> prompt = with_setting_sources({{kPromptText, "--text"}}, [&] {
    return read_prompt_tokens({args.get("--prompt", ""), args.get("--text", ""),
                               args.get("--tokenizer", ""), args.get("--model", ""),
                               args.has("--bos")});
  });
  const std::string journal = journal_of(args.positional()[0]);
  KvEventModel model;
  model.set_clear_scope(scope);
  const KvJournalStats stats = replay_kv_journal(journal, model);
  const std::string lora = args.get("--lora", "base");
  const std::vector<KvLookupRow> rows = model.lookup({prompt, lora});
  if (args.has("--json")) {
    const nlohmann::json out = {{"source", journal},
                                {"batches", stats.batches},
                                {"restarts", stats.restarts},
                                {"decode_errors", stats.decode_errors},
                                {"prompt_tokens", prompt.size()},
                                {"lora", lora},
                                {"rows", kv_lookup_json(rows, model.last_ts())}};
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("kvscope lookup: %zu prompt tokens against %s (%lld batches, LoRA %s)\n",
              prompt.size(), journal.c_str(), static_cast<long long>(stats.batches), lora.c_str());
  if (rows.empty()) std::puts("  no blocks were stored while attached: nothing to match");
  for (const KvLookupRow& r : rows) {
    std::printf("  rank %d %s%s: %s\n", r.rank, r.medium.c_str(),
                r.group != 0 ? (" group " + std::to_string(r.group)).c_str() : "",
                kv_lookup_text(r, model.last_ts()).c_str());
  }
  return 0;
}

}  // namespace kvscope::cli

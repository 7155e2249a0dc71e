// kvscope eval <subverb>: the quality of a KV cache change on the real model against the exact
// fp32 cache (formats, MLA, token eviction, sparse selection, CacheBlend's reuse) and what the
// model's attention and keys look like. Each subverb is its own file (cli/eval_verbs.h); this file
// lists them and keeps the switch spellings of the previous release working (`eval --evict h2o`
// runs `eval evict
// --policy h2o` with a one-line notice).
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/eval_verbs.h"
#include "engine/common/error.h"

namespace kvscope::cli {
namespace {

const Subverb* const kEvalVerbs[] = {
    &eval_format_verb(),    &eval_format_sweep_verb(), &eval_mla_verb(),
    &eval_mla_sweep_verb(), &eval_evict_verb(),        &eval_evict_sweep_verb(),
    &eval_streaming_verb(), &eval_attention_verb(),    &eval_key_channels_verb(),
    &eval_sparse_verb(),    &eval_blend_verb()};

const SubverbCommand kEval{
    "eval",
    "The quality of a KV cache change on the real model against the exact fp32 cache, and what\n"
    "the model's attention and keys look like. Subverbs:",
    kEvalVerbs,
    "Each reads the model and text flags (--model --tokenizer --text --sample --long --threads\n"
    "--backend ...); kvscope eval <subverb> --help lists them.\n"};

// The previous release chose the mode with a switch (or --evict POLICY / --mla-rank R); no
// switch was `format`. --evict's value is --policy's now.
struct OldSwitch {
  const char* flag;
  const char* verb;
};
constexpr OldSwitch kOldSwitches[] = {
    {"--key-channels", "key-channels"}, {"--attention", "attention"}, {"--streaming", "streaming"},
    {"--sweep-evict", "evict-sweep"},   {"--evict", "evict"},         {"--mla-sweep", "mla-sweep"},
    {"--sweep", "format-sweep"},        {"--mla-rank", "mla"}};

const OldSwitch* old_switch(const std::string& flag) {
  for (const OldSwitch& s : kOldSwitches)
    if (flag == s.flag) return &s;
  return nullptr;
}

bool takes_value(const std::string& flag) {
  if (flag == "--evict") return true;
  for (const Subverb* v : kEvalVerbs)
    if (v->value_flags.count(flag) != 0) return true;
  return false;
}

bool reads(const Subverb& verb, const std::string& flag) {
  return flag == "--help" || verb.value_flags.count(flag) != 0 || verb.switches.count(flag) != 0;
}

// How a flag that `verb` does not read was meant: "only applies with --evict" (the old switches
// of the subverbs that read it), or "does not apply with --key-channels".
std::string old_flag_error(const std::string& flag, const OldSwitch* chosen) {
  std::vector<std::string> with;
  bool without_switch = false;
  for (const Subverb* v : kEvalVerbs) {
    if (!reads(*v, flag)) continue;
    bool found = false;
    for (const OldSwitch& s : kOldSwitches) {
      if (std::string(s.verb) != v->name) continue;
      with.emplace_back(s.flag);
      found = true;
    }
    without_switch = without_switch || !found;
  }
  if (without_switch && chosen != nullptr)
    return std::string("does not apply with ") + chosen->flag;
  std::string list;
  for (std::size_t i = 0; i < with.size(); ++i) {
    if (i > 0) list.append(i + 1 == with.size() ? " or " : ", ");
    list.append(with[i]);
  }
  return "only applies with " + list;
}

bool read_by_any(const std::string& flag) {
  for (const Subverb* v : kEvalVerbs)
    if (reads(*v, flag)) return true;
  return false;
}

// The old spelling as the new one: the subverb and its arguments (the switch dropped, --evict
// renamed --policy). A flag the subverb does not read is an error in the old spelling's words.
std::pair<const Subverb*, Argv> translate_old(const Argv& argv) {
  const OldSwitch* chosen = nullptr;
  Argv rest;
  std::vector<std::string> flags;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.size() <= 2 || a.rfind("--", 0) != 0) {
      rest.push_back(a);
      continue;
    }
    const std::string flag = a.substr(0, a.find('='));
    const bool inline_value = flag.size() != a.size();
    flags.push_back(flag);
    if (const OldSwitch* s = old_switch(flag)) {
      if (chosen != nullptr && chosen != s) {
        throw Error(flag, std::string("give either ") + chosen->flag + " or " + flag +
                              ", not both (kvscope eval " + chosen->verb + " or " + s->verb + ")");
      }
      chosen = s;
      if (flag == "--evict")
        rest.push_back("--policy" + a.substr(flag.size()));
      else if (flag == "--mla-rank")
        rest.push_back(a);
      else
        continue;  // a switch, now the subverb
    } else {
      rest.push_back(a);
    }
    if (!inline_value && takes_value(flag) && i + 1 < argv.size()) rest.push_back(argv[++i]);
  }
  const Subverb* verb = chosen == nullptr ? &eval_format_verb() : find_subverb(kEval, chosen->verb);
  for (const std::string& flag : flags) {
    if (old_switch(flag) == nullptr && !reads(*verb, flag) && read_by_any(flag))
      throw Error(flag, old_flag_error(flag, chosen));
  }
  return {verb, rest};
}

}  // namespace

int cmd_eval(const Argv& argv) {
  // A first argument that is no flag names the subverb; otherwise this is the old spelling
  // (nothing at all was `format` on the defaults).
  if (!argv.empty() && argv[0].rfind("-", 0) != 0) return run_subverb_command(kEval, argv);
  bool help = false;
  bool any_switch = false;
  for (const std::string& a : argv) {
    help = help || a == "--help" || a == "-h";
    any_switch = any_switch || old_switch(a.substr(0, a.find('='))) != nullptr;
  }
  if (help && !any_switch) return run_subverb_command(kEval, {"--help"});
  const auto [verb, rest] = translate_old(argv);
  std::string spelling = std::string("kvscope eval ") + verb->name;
  for (const std::string& a : rest) spelling.append(" ").append(a);
  std::fprintf(stderr,
               "kvscope eval: note: the switch spelling goes in the next release; use `%s`\n",
               spelling.c_str());
  return run_subverb_flags(kEval, *verb, rest);
}

}  // namespace kvscope::cli

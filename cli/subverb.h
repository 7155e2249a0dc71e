// Commands made of subverbs (`kvscope eval format`, `kvscope bench kv`): each subverb names its
// own flags, help and run function; one dispatcher lists them, parses a subverb's flags (any
// other flag is an error naming the subverb) and answers --help.
#pragma once

#include <set>
#include <span>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"

namespace kvscope::cli {

struct Subverb {
  const char* name;                   // "format", "evict-sweep"
  const char* summary;                // one line for `kvscope <command> --help`
  std::set<std::string> value_flags;  // the flags it reads that take a value
  std::set<std::string> switches;     // and those that do not (--help is always accepted)
  std::string help;                   // its --help text (usage line first)
  int (*run)(const Args& args);       // the exit code
};

// A command's subverbs with the text `kvscope <command> --help` shows around their list.
struct SubverbCommand {
  const char* name;     // "eval"
  const char* heading;  // a line or two on what the command does, before the list
  std::span<const Subverb* const> verbs;
  const char* footer;  // after the list ("" for none)
};

// The usage line, the heading and one line per subverb (its name and summary), then the footer.
std::string subverb_list_help(const SubverbCommand& command);

// The subverb named `name`, or nullptr.
const Subverb* find_subverb(const SubverbCommand& command, const std::string& name);

// `kvscope <command> <subverb> [flags]`: --help (or nothing) lists the subverbs (exit 0, or 2
// with nothing, on stderr); an unknown subverb is a one-line error; else the subverb runs on
// the arguments after its name (see run_subverb_flags).
int run_subverb_command(const SubverbCommand& command, const Argv& argv);

// One subverb on its arguments: its flags parsed (a flag it does not read is an error naming
// `kvscope <command> <subverb>`), --help printed, a positional argument refused, then run.
int run_subverb_flags(const SubverbCommand& command, const Subverb& verb, const Argv& argv);

}  // namespace kvscope::cli

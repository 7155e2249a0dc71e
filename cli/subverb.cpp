// The subverb dispatcher of eval and bench.
#include "cli/subverb.h"

#include <cstdio>
#include <optional>

#include "engine/common/error.h"

namespace kvscope::cli {

std::string subverb_list_help(const SubverbCommand& command) {
  std::string out = "usage: kvscope ";
  out.append(command.name).append(" <subverb> [options]   (kvscope ").append(command.name);
  out.append(" <subverb> --help for its options)\n\n").append(command.heading).append("\n");
  std::size_t width = 0;
  for (const Subverb* v : command.verbs) width = std::max(width, std::string(v->name).size());
  for (const Subverb* v : command.verbs) {
    std::string line = "  ";
    line.append(v->name).append(width + 2 - std::string(v->name).size(), ' ');
    out.append(line).append(v->summary).append("\n");
  }
  if (command.footer[0] != '\0') out.append("\n").append(command.footer);
  return out;
}

const Subverb* find_subverb(const SubverbCommand& command, const std::string& name) {
  for (const Subverb* v : command.verbs)
    if (name == v->name) return v;
  return nullptr;
}

namespace {

// The subverb's index in `argv` when flags come before it (`bench --threads 1 kv`, which the
// previous release accepted): the first argument that is neither a flag nor a flag's value.
std::optional<std::size_t> subverb_after_flags(const SubverbCommand& command, const Argv& argv) {
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0) return find_subverb(command, a) ? std::optional(i) : std::nullopt;
    if (a.find('=') != std::string::npos) continue;
    for (const Subverb* v : command.verbs) {
      if (v->value_flags.count(a) != 0) {
        ++i;  // its value
        break;
      }
    }
  }
  return std::nullopt;
}

}  // namespace

int run_subverb_command(const SubverbCommand& command, const Argv& argv) {
  if (!argv.empty() && argv[0].rfind("--", 0) == 0 && argv[0] != "--help") {
    if (const auto at = subverb_after_flags(command, argv)) {
      Argv moved = {argv[*at]};
      for (std::size_t i = 0; i < argv.size(); ++i)
        if (i != *at) moved.push_back(argv[i]);
      std::string spelling = std::string("kvscope ") + command.name;
      for (const std::string& a : moved) spelling.append(" ").append(a);
      std::fprintf(stderr, "kvscope %s: note: name the subverb first; use `%s`\n", command.name,
                   spelling.c_str());
      return run_subverb_command(command, moved);
    }
  }
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h" || argv[0] == "help") {
    std::fputs(subverb_list_help(command).c_str(), argv.empty() ? stderr : stdout);
    return argv.empty() ? kExitBadInput : 0;
  }
  const Subverb* verb = find_subverb(command, argv[0]);
  if (verb == nullptr) {
    std::string names;
    for (std::size_t i = 0; i < command.verbs.size(); ++i) {
      if (i > 0) names.append(i + 1 == command.verbs.size() ? " or " : ", ");
      names.append(command.verbs[i]->name);
    }
    fail_expected("",
                  std::string("a subverb: ") + names + " (see kvscope " + command.name + " --help)",
                  "'" + argv[0] + "'");
  }
  return run_subverb_flags(command, *verb, Argv(argv.begin() + 1, argv.end()));
}

int run_subverb_flags(const SubverbCommand& command, const Subverb& verb, const Argv& argv) {
  std::set<std::string> switches = verb.switches;
  switches.insert("--help");
  const std::string spelling = std::string(command.name) + " " + verb.name;
  const Args args(argv, verb.value_flags, switches, spelling);
  if (args.has("--help")) {
    std::fputs(verb.help.c_str(), stdout);
    return 0;
  }
  if (!args.positional().empty()) {
    throw Error(args.positional()[0], "unexpected argument; see kvscope " + spelling + " --help");
  }
  return verb.run(args);
}

}  // namespace kvscope::cli

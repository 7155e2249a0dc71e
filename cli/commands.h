// The kvscope subcommands. Each takes its arguments (after the subcommand name) and returns the
// process exit code: 0 success, 2 bad input (a one-line error was printed), 1 anything else.
#pragma once

#include <string>
#include <vector>

namespace kvscope::cli {

using Argv = std::vector<std::string>;

int cmd_generate(const Argv& args);
int cmd_info(const Argv& args);
int cmd_synth(const Argv& args);
int cmd_bench(const Argv& args);
int cmd_run(const Argv& args);
int cmd_trace(const Argv& args);
int cmd_trace_kernel(const Argv& args);  // kvscope trace kernel (argv[0] is "kernel")
int cmd_eval(const Argv& args);
int cmd_memwall(const Argv& args);
int cmd_disagg(const Argv& args);
int cmd_tokenize(const Argv& args);
int cmd_attach(const Argv& args);
int cmd_lookup(const Argv& args);

}  // namespace kvscope::cli

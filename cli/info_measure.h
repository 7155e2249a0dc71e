// kvscope info --measure LIST: one sequence per context run through the real model, its KV memory
// read from the formula, the allocator and the operating system; a table, a CSV and a PNG.
#pragma once

#include <string>

#include "cli/args.h"
#include "engine/model/locate.h"

namespace kvscope::cli {

// `args` are info's; `loaded` the model (native weights). Returns the exit code; throws
// kvscope::Error on bad input.
int run_info_measure(const Args& args, const LoadedModel& loaded);

}  // namespace kvscope::cli

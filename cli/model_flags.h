// --model and --tokenizer as the commands that load a model read them: the engine's load_model,
// with its errors about the tokenizer path and the weight storage located at the flags.
#pragma once

#include "cli/args.h"
#include "engine/model/locate.h"

namespace kvscope::cli {

// load_model(--model, --tokenizer, storage, format); an error about the tokenizer path names
// --tokenizer, one about the weight storage --weights (the flag `storage` comes from).
LoadedModel load_model_flags(const Args& args, WeightStorage storage = WeightStorage::kMapped,
                             WeightFormat format = WeightFormat::kNative);

}  // namespace kvscope::cli

// load_model on the --model and --tokenizer flags.
#include "cli/model_flags.h"

#include "engine/common/setting_source.h"

namespace kvscope::cli {

LoadedModel load_model_flags(const Args& args, WeightStorage storage, WeightFormat format) {
  return with_setting_sources(
      {{kTokenizerPath, "--tokenizer"}, {kWeightStorage, "--weights"}},
      [&] { return load_model(args.get("--model"), args.get("--tokenizer"), storage, format); });
}

}  // namespace kvscope::cli

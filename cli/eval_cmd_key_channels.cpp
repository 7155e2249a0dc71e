// kvscope eval key-channels: KIVI's outlier channels measured on the model's own fp32 K/V (the
// measurement is eval_channels.cpp).
#include "cli/eval_channels.h"
#include "cli/eval_input.h"
#include "cli/eval_verbs.h"
#include "engine/common/error.h"

namespace kvscope::cli {
namespace {

int run(const Args& args) {
  check_eval_input_flags(args);
  EvalModel m = load_eval_model(args);
  const EvalText text = read_eval_text(args, m);
  const int layer = args.get_int("--layer", -1);
  if (args.has("--layer") && layer < 0)
    fail_expected("--layer", "a layer index >= 0", args.get("--layer"));
  return run_key_channels(m.loaded.model, *m.backend, text.windows, text.source, layer,
                          args.get("--out", "reports/kivi"), args.has("--json"));
}

}  // namespace

const Subverb& eval_key_channels_verb() {
  static const Subverb verb{
      "key-channels",
      "KIVI's outlier channels: how far the largest key/value channel stands out per layer",
      eval_value_flags({"--layer", "--out"}),
      {"--json"},
      eval_help(R"(usage: kvscope eval key-channels [options]

KIVI's outlier channels on the model's own K/V (fp32 cache): per layer, how far the largest key
and value channel stand out (mean |x| over the median channel); <out>/key_channels.csv and
key_channels.png for one layer.

  --layer L                  the layer plotted (default: the one whose keys stand out most)
  --out DIR                  where the CSV and plot go (default reports/kivi)
  --json                     print the report as JSON
)"),
      run};
  return verb;
}

}  // namespace kvscope::cli

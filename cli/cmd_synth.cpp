// kvscope synth: write a synthetic (random-weight) model as a llama2.c checkpoint.
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "engine/common/error.h"
#include "engine/model/synthetic.h"

namespace kvscope::cli {

int cmd_synth(const Argv& argv) {
  Args args(argv, {"--model", "--out"}, {"--help"});
  if (args.has("--help")) {
    std::fputs(
        "usage: kvscope synth --model synthetic:PRESET[,key=value...] --out FILE.bin\n"
        "writes seeded random weights of that shape as a legacy llama2.c checkpoint, so any\n"
        "llama2.c-compatible program can run the same shape. Example:\n"
        "  kvscope synth --model synthetic:stories110m,vocab=512 --out /tmp/s110m.bin\n",
        stdout);
    return 0;
  }
  const std::string model = args.get("--model");
  const std::string out = args.get("--out");
  if (!is_synthetic_model_arg(model))
    fail_expected("--model", "synthetic:PRESET", "'" + model + "'");
  if (out.empty()) throw Error("--out", "expected an output file name");
  SyntheticSpec spec = parse_synthetic_spec(model.substr(10));
  const double bytes = static_cast<double>(spec.config.num_params()) * 4;
  std::fprintf(stderr, "generating %s random weights (%s)...\n",
               with_commas(spec.config.num_params()).c_str(), human_bytes(bytes).c_str());
  auto m = make_synthetic_model(spec);
  write_checkpoint(*m, out);
  std::fprintf(stderr, "wrote %s: %s [random weights, seed %llu]\n", out.c_str(),
               spec.config.describe().c_str(), static_cast<unsigned long long>(spec.seed));
  return 0;
}

}  // namespace kvscope::cli

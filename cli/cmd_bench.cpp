// kvscope bench <subverb>: measured performance, reported as absolute figures and as ratios
// against a baseline measured in the same run (never as timed assertions in tests). Each
// benchmark is its own file (cli/bench_verbs.h) with its own flags and help; this file lists them.
#include "cli/bench_verbs.h"
#include "cli/commands.h"

namespace kvscope::cli {
namespace {

const Subverb* const kBenchVerbs[] = {
    &bench_generate_verb(), &bench_weights_verb(), &bench_kv_verb(),    &bench_alloc_verb(),
    &bench_quant_verb(),    &bench_mla_verb(),     &bench_batch_verb(), &bench_attention_verb(),
    &bench_evict_verb(),    &bench_tiers_verb()};

const SubverbCommand kBench{
    "bench",
    "Measured performance, as absolute figures and as ratios against a baseline measured in the\n"
    "same run. Subverbs:",
    kBenchVerbs, ""};

}  // namespace

int cmd_bench(const Argv& argv) {
  return run_subverb_command(kBench, argv);
}

}  // namespace kvscope::cli

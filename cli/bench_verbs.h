// The `kvscope bench` subverbs, one file each (cli/cmd_bench_<name>.cpp): its flags, its help and
// its run. cmd_bench.cpp lists them.
#pragma once

#include "cli/subverb.h"

namespace kvscope::cli {

const Subverb& bench_generate_verb();   // cmd_bench_generate.cpp
const Subverb& bench_weights_verb();    // cmd_bench_weights.cpp
const Subverb& bench_kv_verb();         // cmd_bench_kv.cpp
const Subverb& bench_alloc_verb();      // cmd_bench_alloc.cpp
const Subverb& bench_quant_verb();      // cmd_bench_quant.cpp
const Subverb& bench_mla_verb();        // cmd_bench_mla.cpp
const Subverb& bench_batch_verb();      // cmd_bench_batch.cpp
const Subverb& bench_attention_verb();  // cmd_bench_attention.cpp
const Subverb& bench_evict_verb();      // cmd_bench_evict.cpp
const Subverb& bench_tiers_verb();      // cmd_bench_tiers.cpp

}  // namespace kvscope::cli

// The `kvscope eval` subverbs, one file each (cli/eval_cmd_<name>.cpp): its flags, its help and
// its run. cmd_eval.cpp lists them and keeps the old switch spellings working.
#pragma once

#include "cli/subverb.h"

namespace kvscope::cli {

const Subverb& eval_format_verb();        // eval_cmd_format.cpp
const Subverb& eval_format_sweep_verb();  // eval_cmd_format_sweep.cpp
const Subverb& eval_mla_verb();           // eval_cmd_mla.cpp
const Subverb& eval_mla_sweep_verb();     // eval_cmd_mla_sweep.cpp
const Subverb& eval_evict_verb();         // eval_cmd_evict.cpp
const Subverb& eval_evict_sweep_verb();   // eval_cmd_evict_sweep.cpp
const Subverb& eval_streaming_verb();     // eval_cmd_streaming.cpp
const Subverb& eval_attention_verb();     // eval_cmd_attention.cpp
const Subverb& eval_key_channels_verb();  // eval_cmd_key_channels.cpp
const Subverb& eval_sparse_verb();        // eval_cmd_sparse.cpp
const Subverb& eval_blend_verb();         // eval_cmd_blend.cpp

}  // namespace kvscope::cli

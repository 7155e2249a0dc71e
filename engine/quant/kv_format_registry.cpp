// The one list of named KV formats and the sweep ladder built on it.
#include "engine/quant/kv_format_registry.h"

namespace kvscope::quant {

std::string KvLadderEntry::display_name() const {
  if (!mixed()) return k;
  std::string name = "K ";
  return name.append(k).append(" + V ").append(v);
}

const std::vector<KvLadderEntry>& kv_format_sweep() {
  // kivi2-r64 is a rung of its own (not only a parser example): in kvscope the residual R is
  // also the key group length, so it shows what a longer group costs against kivi2's 32
  // (docs/concepts/quantization.md). Every list has it, the app's sweep and combos included.
  static const std::vector<KvLadderEntry> ladder = {
      {"fp32", "fp32", "float", "IEEE binary32: the exact reference"},
      {"fp16", "fp16", "float", "IEEE binary16, nearest-even, saturating at +-65504"},
      {"bf16", "bf16", "float", "bfloat16, nearest-even, saturating"},
      {"fp8-e4m3", "fp8-e4m3", "float", "OCP FP8 E4M3 with a bf16 scale per token per head"},
      {"fp8-e5m2", "fp8-e5m2", "float", "OCP FP8 E5M2 with a bf16 scale per token per head"},
      {"int8", "int8", "int8 / int4 per token",
       "symmetric int8 with an fp16 scale per token per head"},
      {"int8", "int4", "mixed K/V", "keys int8, values int4: values tolerate fewer bits"},
      {"int4", "int4", "int8 / int4 per token",
       "asymmetric 4-bit, fp16 scale + zero per group of 32 values of a token's row"},
      {"int4-g8", "int4-g8", "int8 / int4 per token",
       "int4 with groups of 8 values (one per head when head_dim is 8)"},
      {"kivi4", "kivi4", "KIVI",
       "KIVI 4-bit: keys per channel over 32-token groups, values per token, open group fp32"},
      {"kivi2", "kivi2", "KIVI",
       "KIVI 2-bit: keys per channel over 32-token groups, values per token, open group fp32"},
      {"kivi2-r64", "kivi2-r64", "KIVI", "KIVI 2-bit with 64-token key groups and residual"},
      {"int2", "int2", "int2 per token",
       "asymmetric 2-bit per group of 32 values of a token's row: the plain 2-bit baseline"},
      {"int2-g8", "int2-g8", "int2 per token", "int2 with groups of 8 values"},
  };
  return ladder;
}

const std::vector<KvLadderEntry>& kv_formats() {
  static const std::vector<KvLadderEntry> plain = [] {
    std::vector<KvLadderEntry> out;
    for (const KvLadderEntry& e : kv_format_sweep())
      if (!e.mixed()) out.push_back(e);
    return out;
  }();
  return plain;
}

}  // namespace kvscope::quant

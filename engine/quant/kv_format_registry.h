// The KV formats kvscope offers by name, in one list: the `kvscope eval format-sweep` and mla-sweep
// ladder, the Quality panel's background sweep and the Controls panel's K/V format combos all
// read it, so a format added here shows up in each of them at once. docs/concepts/quantization.md
// describes every format; a test checks its measured table has a row for every rung.
//
// parse_kv_format (engine/kv/kv_format.h) accepts more than this list: any group size -gN and
// KIVI residual -rR, and its error names the base formats (kv_format_names()). This list is the
// named rungs worth comparing, not the grammar; it holds every base format (a test checks it).
#pragma once

#include <string>
#include <vector>

namespace kvscope::quant {

// One rung of the ladder: K and V formats by their parse_kv_format names (equal for a plain
// format, different for a mixed K/V pair), the plot legend group it belongs to, and what it is.
struct KvLadderEntry {
  std::string k;
  std::string v;
  std::string family;       // legend group: "float", "int8 / int4 per token", "KIVI", ...
  std::string description;  // one line: what is stored per value and per token

  bool mixed() const { return k != v; }
  // What lists and reports call the rung: the format's name, or "K int8 + V int4" for a mixed
  // pair (the name make_kv_format_variant gives it, so a CSV row and its rung read alike).
  std::string display_name() const;
};

// The ladder, in the order every list shows it:
//   - fp32 first: the reference every other rung is measured against;
//   - then code bits per value, K plus V, non-increasing (32+32, 16+16, 8+8, 8+4, 4+4, 2+2);
//   - at equal bits, a plain format before its -gN / -rN variants, and KIVI (4 and 2 bits)
//     between the 4-bit and the 2-bit per-token formats so its rungs stay together.
// This is also the row order of quant_sweep.csv and of mla_sweep.csv's format rows.
const std::vector<KvLadderEntry>& kv_format_sweep();

// The plain rungs (K = V) of the ladder in ladder order: every named KV format.
const std::vector<KvLadderEntry>& kv_formats();

}  // namespace kvscope::quant

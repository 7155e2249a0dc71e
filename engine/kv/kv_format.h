// KvFormat: how K or V values are stored in the pool. A "tile" is one block's worth of one layer's
// K (or V): [block_size tokens][kv_heads][head_dim] values plus whatever metadata the format needs.
// Byte accounting here is exact: memory figures anywhere in kvscope come from these functions.
// The codecs that fill and read tiles live in engine/quant; docs/concepts/quantization.md explains
// every format.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace kvscope {

enum class KvKind : int { kKey = 0, kValue = 1 };

enum class KvDtype {
  kF32,      // IEEE binary32, the reference
  kF16,      // IEEE binary16, round to nearest even, saturating at +-65504
  kBF16,     // bfloat16, round to nearest even, saturating
  kFp8E4M3,  // OCP FP8 E4M3 (max 448) with a bf16 scale per token per head
  kFp8E5M2,  // OCP FP8 E5M2 (max 57344) with a bf16 scale per token per head
  kInt8,     // symmetric int8, fp16 scale per token per head
  kInt4,     // asymmetric 4-bit, fp16 scale + fp16 zero (min) per group of a token's row
  kInt2,     // asymmetric 2-bit per token group: the bad baseline
  kKivi2,    // KIVI 2-bit: keys per channel over groups of `residual` tokens, values per token;
  kKivi4,    //   the open group stays full precision (fp32 staging) until it fills
};

struct KvFormat {
  KvDtype dtype = KvDtype::kF32;
  // int4 / int2 / KIVI values: values per quantization group along a token's row
  // [kv_heads * head_dim] (groups may span heads; capped at the row).
  int group_size = 32;
  // KIVI: tokens per key group = tokens kept in full precision before a group is quantized.
  int residual = 32;

  // Payload bits per value (32, 16, 8, 4 or 2).
  int bits() const;
  bool is_kivi() const { return dtype == KvDtype::kKivi2 || dtype == KvDtype::kKivi4; }
  // The group actually used for a row of kv_dim values: min(group_size, kv_dim).
  int effective_group(int kv_dim) const;

  // Tile layout, all in bytes: [block_size][row_bytes] codes, then [block_size][token_meta_bytes]
  // per-token scales, then tile_meta_bytes of per-tile metadata (KIVI key channel scales).
  std::size_t row_bytes(int kv_heads, int head_dim) const;
  std::size_t token_meta_bytes(int kv_heads, int head_dim, KvKind kind) const;
  std::size_t tile_meta_bytes(int block_size, int kv_heads, int head_dim, KvKind kind) const;
  // Bytes of one tile of `block_size` tokens x `kv_heads` x `head_dim` values. The kind matters
  // only for KIVI (keys per channel, values per token); other formats lay K and V out alike.
  std::size_t tile_bytes(int block_size, int kv_heads, int head_dim,
                         KvKind kind = KvKind::kValue) const;
  // Average bytes per token per layer for one of K or V (tile_bytes / block_size). KIVI's
  // full-precision staging is per sequence, not per token: see staging_bytes_per_sequence.
  double bytes_per_token(int block_size, int kv_heads, int head_dim,
                         KvKind kind = KvKind::kValue) const;
  // KIVI: fp32 bytes one sequence holds for its open group, per layer (0 for other formats).
  std::size_t staging_bytes_per_sequence(int kv_heads, int head_dim) const;

  // Throws kvscope::Error when this format cannot store the given shape (group not dividing the
  // row, KIVI residual not dividing / divided by the block size, odd packing).
  void validate(int block_size, int kv_heads, int head_dim, const std::string& where) const;

  std::string name() const;
  bool operator==(const KvFormat&) const = default;
};

// Parses "fp32", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2", "int8", "int4[-gN]", "int2[-gN]",
// "kivi2[-rN][-gN]", "kivi4[-rN][-gN]"; throws kvscope::Error naming `where` and the names.
KvFormat parse_kv_format(const std::string& name, const std::string& where);
// Every base format name, reference first.
std::vector<std::string> kv_format_names();

}  // namespace kvscope

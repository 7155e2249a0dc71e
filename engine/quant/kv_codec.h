// Reading and writing K/V tiles in any KvFormat: quantize one token on write, dequantize one head
// of one token on read. The CPU kv_write and paged_attention go through these, so attention
// dequantizes per head on the fly; only a step's queries that read the same slots share one
// dequantization, and only evaluation runs keep a float copy of a sequence (DecodedKvCache,
// engine/kv/decoded_kv.h).
#pragma once

#include <cstddef>

#include "engine/kv/kv_view.h"

namespace kvscope::quant {

// Where things are inside one tile of a format (bytes), and the shape they serve.
struct TileGeometry {
  int block_size = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int kv_dim = 0;                    // kv_heads * head_dim values per token
  int bits = 32;                     // code width
  int group = 0;                     // values per group along a token's row (int4/int2/KIVI values)
  int residual = 0;                  // KIVI tokens per key group
  std::size_t row_bytes = 0;         // codes of one token
  std::size_t token_meta_bytes = 0;  // per-token scales of one token
  std::size_t meta_offset = 0;       // start of [block_size][token_meta_bytes]
  std::size_t tile_meta_offset = 0;  // start of per-tile metadata (KIVI key channel scales)
  std::size_t tile_bytes = 0;
};
TileGeometry tile_geometry(const KvLayout& layout, KvKind kind);

// Stores row[kv_heads * head_dim] as the view's write slot of `layer`'s K or V. For KIVI it goes to
// the sequence's fp32 staging, and the whole group is quantized into the tiles when it fills.
// Throws kvscope::Error if a KIVI group is continued whose staging does not exist.
void write_token(const KvSeqView& view, int layer, KvKind kind, const float* row);

// Decodes heads of one layer's K or V through a view. Construct once per attention call (outside
// any parallel region: it may throw); head() is then safe to call from many threads.
class TileReader {
 public:
  TileReader(const KvSeqView& view, int layer, KvKind kind);
  // Head `kvh` of `slot` as head_dim floats: a pointer into the cache (fp32 tiles, KIVI staging)
  // or into `tmp` [head_dim] after dequantizing.
  const float* head(int slot, int kvh, float* tmp) const;
  bool is_fp32() const { return dtype_ == KvDtype::kF32; }

 private:
  const std::byte* tile_of(int slot) const;
  KvSeqView view_;  // a copy: small (pointers and a span), so temporaries are safe
  KvDtype dtype_;
  bool is_key_;
  TileGeometry g_;
  const std::byte* contiguous_base_ = nullptr;  // first tile when the view is contiguous
  int open_start_ = 0;           // KIVI: first slot of the open (full-precision) group
  const float* open_ = nullptr;  // KIVI: its staging [residual][kv_dim]
  const KvStorage* storage_;
  int layer_;
  KvKind kind_;
};

}  // namespace kvscope::quant

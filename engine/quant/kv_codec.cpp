// Tile codecs for every KvFormat: token writes (with KIVI group hand-over) and per-head reads.
#include "engine/quant/kv_codec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/quant/float_formats.h"
#include "engine/quant/int_codec.h"

namespace kvscope::quant {
namespace {

inline std::uint16_t load_u16(const std::byte* p) {
  std::uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store_u16(std::byte* p, std::uint16_t v) {
  std::memcpy(p, &v, sizeof v);
}
inline const std::uint8_t* u8(const std::byte* p) {
  return reinterpret_cast<const std::uint8_t*>(p);
}
inline std::uint8_t* u8(std::byte* p) {
  return reinterpret_cast<std::uint8_t*>(p);
}

// Codes [c0, c0 + n) of a row of packed `bits`-bit codes, as floats (what get_code gives; the
// common widths with their shifts known to the compiler).
void codes_to_f32(const std::uint8_t* row, int c0, int n, int bits, float* out) {
  switch (bits) {
    case 4:
      for (int i = 0; i < n; ++i) {
        const int c = c0 + i;
        out[i] = static_cast<float>((row[c >> 1] >> ((c & 1) * 4)) & 0xFu);
      }
      return;
    case 2:
      for (int i = 0; i < n; ++i) {
        const int c = c0 + i;
        out[i] = static_cast<float>((row[c >> 2] >> ((c & 3) * 2)) & 0x3u);
      }
      return;
    default:
      for (int i = 0; i < n; ++i) out[i] = static_cast<float>(get_code(row, c0 + i, bits));
  }
}

// (scale, zero) pairs of one head TileReader::head converts into a stack buffer (a head_dim of
// 256 per channel); a head with more takes a heap buffer.
constexpr int kMaxStackPairs = 256;

// Per-token asymmetric groups of a row: codes into `codes`, (scale, zero) pairs into `meta`.
void quantize_row_groups(const TileGeometry& g, const float* row, std::byte* codes,
                         std::byte* meta) {
  for (int first = 0, k = 0; first < g.kv_dim; first += g.group, ++k) {
    const ScaleZero sz = quantize_asym(row + first, g.group, 1, g.bits, u8(codes), first);
    store_u16(meta + static_cast<std::size_t>(k) * 4, sz.scale);
    store_u16(meta + static_cast<std::size_t>(k) * 4 + 2, sz.zero);
  }
}

// One token in a per-token format (everything but fp32 and KIVI).
void encode_token(const TileGeometry& g, KvDtype d, const float* row, std::byte* tile, int offset) {
  std::byte* codes = tile + static_cast<std::size_t>(offset) * g.row_bytes;
  std::byte* meta = tile + g.meta_offset + static_cast<std::size_t>(offset) * g.token_meta_bytes;
  switch (d) {
    case KvDtype::kF16:
      for (int i = 0; i < g.kv_dim; ++i) store_u16(codes + 2 * i, f32_to_f16(row[i]));
      return;
    case KvDtype::kBF16:
      for (int i = 0; i < g.kv_dim; ++i) store_u16(codes + 2 * i, f32_to_bf16(row[i]));
      return;
    case KvDtype::kFp8E4M3:
    case KvDtype::kFp8E5M2: {
      const bool e4 = d == KvDtype::kFp8E4M3;
      const float fmax = e4 ? kE4M3Max : kE5M2Max;
      for (int h = 0; h < g.kv_heads; ++h) {
        const float* x = row + static_cast<std::size_t>(h) * g.head_dim;
        float amax = 0.0f;
        for (int i = 0; i < g.head_dim; ++i) {
          if (std::isfinite(x[i])) amax = std::max(amax, std::fabs(x[i]));
        }
        // bf16 scale: amax / 57344 would fall into fp16's subnormals for |x| < 3.5.
        const std::uint16_t stored = f32_to_bf16(amax / fmax);
        const float scale = bf16_to_f32(stored);
        store_u16(meta + 2 * h, stored);
        for (int i = 0; i < g.head_dim; ++i) {
          const float v = scale > 0.0f ? x[i] / scale : 0.0f;  // saturates if rounding overshoots
          u8(codes)[h * g.head_dim + i] = e4 ? f32_to_e4m3(v) : f32_to_e5m2(v);
        }
      }
      return;
    }
    case KvDtype::kInt8:
      for (int h = 0; h < g.kv_heads; ++h) {
        const std::uint16_t s =
            quantize_int8(row + static_cast<std::size_t>(h) * g.head_dim, g.head_dim,
                          reinterpret_cast<std::int8_t*>(codes) + h * g.head_dim);
        store_u16(meta + 2 * h, s);
      }
      return;
    case KvDtype::kInt4:
    case KvDtype::kInt2:
      quantize_row_groups(g, row, codes, meta);
      return;
    default:
      return;
  }
}

// Quantizes a filled KIVI group (staging [residual][kv_dim]) starting at slot g0 into the tiles.
void flush_kivi_group(const KvSeqView& view, const TileGeometry& g, int layer, KvKind kind, int g0,
                      const float* staging) {
  const int R = g.residual, B = g.block_size;
  std::vector<std::uint8_t*> rows(static_cast<std::size_t>(R));  // [R] code rows of the group
  for (int i = 0; i < R; ++i) {
    const int slot = g0 + i;
    std::byte* tile =
        view.storage->tile(layer, kind, view.blocks[static_cast<std::size_t>(slot / B)]);
    rows[static_cast<std::size_t>(i)] = u8(tile + static_cast<std::size_t>(slot % B) * g.row_bytes);
    if (kind == KvKind::kValue) {
      // Values: per token, asymmetric groups along the row.
      quantize_row_groups(
          g, staging + static_cast<std::size_t>(i) * g.kv_dim,
          tile + static_cast<std::size_t>(slot % B) * g.row_bytes,
          tile + g.meta_offset + static_cast<std::size_t>(slot % B) * g.token_meta_bytes);
    }
  }
  if (kind == KvKind::kValue) return;
  // Keys: per channel over the group's R tokens; the (scale, zero) set goes into every tile the
  // group touches (a tile larger than the group holds one set per group, at index offset / R).
  const int set = B >= R ? (g0 % B) / R : 0;
  const int first_block = g0 / B, last_block = (g0 + R - 1) / B;
  for (int c = 0; c < g.kv_dim; ++c) {
    const ScaleZero sz = quantize_asym_column(staging + c, R, g.kv_dim, g.bits, rows.data(), c);
    for (int b = first_block; b <= last_block; ++b) {
      std::byte* tile = view.storage->tile(layer, kind, view.blocks[static_cast<std::size_t>(b)]);
      std::byte* m = tile + g.tile_meta_offset +
                     (static_cast<std::size_t>(set) * g.kv_dim + static_cast<std::size_t>(c)) * 4;
      store_u16(m, sz.scale);
      store_u16(m + 2, sz.zero);
    }
  }
}

}  // namespace

TileGeometry tile_geometry(const KvLayout& layout, KvKind kind) {
  const KvFormat& f = layout.format(kind);
  TileGeometry g;
  g.block_size = layout.block_size;
  g.kv_heads = layout.row_heads(kind);
  g.head_dim = layout.row_head_dim(kind);
  g.kv_dim = g.kv_heads * g.head_dim;
  g.bits = f.bits();
  g.group = f.effective_group(g.kv_dim);
  g.residual = f.residual;
  g.row_bytes = f.row_bytes(g.kv_heads, g.head_dim);
  g.token_meta_bytes = f.token_meta_bytes(g.kv_heads, g.head_dim, kind);
  g.meta_offset = static_cast<std::size_t>(g.block_size) * g.row_bytes;
  g.tile_meta_offset = g.meta_offset + static_cast<std::size_t>(g.block_size) * g.token_meta_bytes;
  g.tile_bytes = layout.tile_bytes(kind);
  return g;
}

void write_token(const KvSeqView& view, int layer, KvKind kind, const float* row) {
  const KvLayout& L = view.storage->layout();
  const KvFormat& f = L.format(kind);
  const int slot = view.write_slot();
  const int B = L.block_size;
  std::byte* tile =
      view.storage->tile(layer, kind, view.blocks[static_cast<std::size_t>(slot / B)]);
  const std::size_t kv_dim = static_cast<std::size_t>(L.row_heads(kind)) * L.row_head_dim(kind);
  if (f.dtype == KvDtype::kF32) {
    std::memcpy(tile + static_cast<std::size_t>(slot % B) * kv_dim * sizeof(float), row,
                kv_dim * sizeof(float));
    return;
  }
  const TileGeometry g = tile_geometry(L, kind);
  if (!f.is_kivi()) {
    encode_token(g, f.dtype, row, tile, slot % B);
    return;
  }
  // KIVI: stage in full precision; quantize the whole group when its last token arrives.
  const int R = f.residual;
  const int g0 = slot - slot % R;
  const BlockId gb = view.blocks[static_cast<std::size_t>(g0 / B)];
  float* staging = view.storage->staging(layer, kind, gb, g0 % B, /*create=*/slot % R == 0);
  if (staging == nullptr) {
    throw Error("kv cache", f.name() + " cannot continue the group starting at slot " +
                                std::to_string(g0) + " (layer " + std::to_string(layer) +
                                "): its full-precision staging does not exist (was the group "
                                "started in another sequence's block?)");
  }
  std::memcpy(staging + static_cast<std::size_t>(slot % R) * kv_dim, row, kv_dim * sizeof(float));
  if (slot % R == R - 1) {
    flush_kivi_group(view, g, layer, kind, g0, staging);
    view.storage->drop_staging(layer, kind, gb, g0 % B);
  }
}

TileReader::TileReader(const KvSeqView& view, int layer, KvKind kind)
    : view_(view), storage_(view.storage), layer_(layer), kind_(kind) {
  const KvLayout& L = storage_->layout();
  const KvFormat& f = L.format(kind);
  dtype_ = f.dtype;
  is_key_ = kind == KvKind::kKey;
  g_ = tile_geometry(L, kind);
  if (view.contiguous && !view.blocks.empty())
    contiguous_base_ = storage_->tile(layer, kind, view.blocks[0]);
  open_start_ = view.num_slots;
  if (f.is_kivi() && view.num_slots % f.residual != 0) {
    open_start_ = view.num_slots - view.num_slots % f.residual;
    open_ = storage_->staging(layer, kind,
                              view.blocks[static_cast<std::size_t>(open_start_ / L.block_size)],
                              open_start_ % L.block_size);
    if (open_ == nullptr) {
      throw Error("kv cache", f.name() + ": no full-precision staging for the open group at slot " +
                                  std::to_string(open_start_) + " (layer " + std::to_string(layer) +
                                  ")");
    }
  }
}

const std::byte* TileReader::tile_of(int slot) const {
  const int B = g_.block_size;
  if (contiguous_base_ != nullptr)
    return contiguous_base_ + static_cast<std::size_t>(slot / B) * g_.tile_bytes;
  return storage_->tile(layer_, kind_, view_.blocks[static_cast<std::size_t>(slot / B)]);
}

const float* TileReader::head(int slot, int kvh, float* tmp) const {
  const int hd = g_.head_dim;
  const int c0 = kvh * hd;  // first channel of the head in the row
  if (slot >= open_start_)
    return open_ + static_cast<std::size_t>(slot - open_start_) * g_.kv_dim + c0;
  const std::byte* tile = tile_of(slot);
  const int offset = slot % g_.block_size;
  const std::byte* codes = tile + static_cast<std::size_t>(offset) * g_.row_bytes;
  const std::byte* meta =
      tile + g_.meta_offset + static_cast<std::size_t>(offset) * g_.token_meta_bytes;
  switch (dtype_) {
    case KvDtype::kF32:
      return reinterpret_cast<const float*>(codes) + c0;
    case KvDtype::kF16:
      f16_row_to_f32(codes + 2 * c0, tmp, hd);
      return tmp;
    case KvDtype::kBF16:
      bf16_row_to_f32(codes + 2 * c0, tmp, hd);
      return tmp;
    case KvDtype::kFp8E4M3:
    case KvDtype::kFp8E5M2: {
      const float* table = dtype_ == KvDtype::kFp8E4M3 ? e4m3_table() : e5m2_table();
      const float scale = bf16_to_f32(load_u16(meta + 2 * kvh));
      for (int i = 0; i < hd; ++i) tmp[i] = table[u8(codes)[c0 + i]] * scale;
      return tmp;
    }
    case KvDtype::kInt8: {
      const float scale = f16_to_f32(load_u16(meta + 2 * kvh));
      const auto* q = reinterpret_cast<const std::int8_t*>(codes) + c0;
      for (int i = 0; i < hd; ++i) tmp[i] = static_cast<float>(q[i]) * scale;
      return tmp;
    }
    case KvDtype::kInt4:
    case KvDtype::kInt2:
    case KvDtype::kKivi2:
    case KvDtype::kKivi4: {
      // tmp[i] = code * scale + zero with the (scale, zero) fp16 pair of the element's group: a
      // group of one channel for KIVI keys (per channel over a token group), else the row's
      // groups. The head's pairs are converted at once (F16C), then applied a group at a time.
      const bool per_channel = is_key_ && (dtype_ == KvDtype::kKivi2 || dtype_ == KvDtype::kKivi4);
      const int group = per_channel ? 1 : g_.group;
      const int first_group = c0 / group;
      const std::byte* m;  // element 0's pair
      if (per_channel) {
        const int set = g_.block_size >= g_.residual ? offset / g_.residual : 0;
        m = tile + g_.tile_meta_offset + (static_cast<std::size_t>(set) * g_.kv_dim + c0) * 4;
      } else {
        m = meta + static_cast<std::size_t>(first_group) * 4;
      }
      const int pairs = (c0 + hd - 1) / group - first_group + 1;
      float stack[2 * kMaxStackPairs];
      std::vector<float> heap;  // only for a head with more pairs than that
      float* sz = stack;
      if (pairs > kMaxStackPairs) {
        heap.resize(2 * static_cast<std::size_t>(pairs));
        sz = heap.data();
      }
      f16_row_to_f32(m, sz, 2 * pairs);
      codes_to_f32(u8(codes), c0, hd, g_.bits, tmp);
      // Elements [i, end) share pair p.
      for (int i = 0, p = 0; i < hd; ++p) {
        const int end = std::min(hd, (first_group + p + 1) * group - c0);
        const float scale = sz[2 * p], zero = sz[2 * p + 1];
        for (; i < end; ++i) tmp[i] = tmp[i] * scale + zero;
      }
      return tmp;
    }
  }
  return tmp;
}

}  // namespace kvscope::quant

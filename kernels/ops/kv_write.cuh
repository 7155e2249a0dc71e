// One token's K and V rows into its slot of a paged pool, quantized on the way in to the pool's
// format. fp32, fp16, bf16, int8, FP8 E4M3/E5M2: one warp per (KV head, K or V); scaled formats
// reduce the head's largest finite |x| across the warp, store the scale (fp16 for int8: amax/127;
// bf16 for FP8: amax/format max), then the codes. int4 / int2 (groups along the row, which may
// span heads and need not start on a byte): one warp per row, which first stores every group's
// fp16 zero (its minimum) and scale, then, after a barrier, packs whole bytes of codes (no two
// threads share a byte). CPU twin: quant::write_token (the bytes written are the CPU's, bit for
// bit: tests/kernels/kernel_parity_test.cpp).
#pragma once

#include "kernels/common/kv_formats.cuh"
#include "kernels/common/reduce.cuh"

KVS_KERNELS_BEGIN

// Head `head` of a token's row x (kv_heads x head_dim values; x points at the whole row) into
// row `offset` of `tile`, for the per-head formats (not int4 / int2). Called by a whole warp.
// The memory trace (kernels/sim/memory_trace.h) records its stores as `trace_what` (K or V codes;
// the scales the next value) of physical block `trace_tile` (-1: not traced).
KVS_DEVICE void store_head(const KvTiles& t, unsigned char* tile, int offset, int block_size,
                           int head, const float* row, int kv_heads, int head_dim,
                           int trace_tile = -1, unsigned trace_what = simt::kTraceKCodes) {
  const float* x = row + static_cast<long>(head) * head_dim;
  const int kv_dim = kv_heads * head_dim;
  const long first = static_cast<long>(offset) * kv_dim + static_cast<long>(head) * head_dim;
  const int lane = static_cast<int>(simt::lane());
  if (!kv_has_scale(t.code)) {
    for (int i = lane; i < head_dim; i += 32) {
      if (t.code == kKvF32) {
        reinterpret_cast<float*>(tile)[first + i] = x[i];
        if (trace_tile >= 0)
          simt::trace_store(reinterpret_cast<float*>(tile) + first + i, 4, trace_what, trace_tile,
                            simt::trace_key(40, i / 32, 0));
      } else {
        reinterpret_cast<std::uint16_t*>(tile)[first + i] =
            t.code == kKvF16 ? f16_saturating(x[i]) : bf16_saturating(x[i]);
        if (trace_tile >= 0)
          simt::trace_store(reinterpret_cast<std::uint16_t*>(tile) + first + i, 2, trace_what,
                            trace_tile, simt::trace_key(40, i / 32, 0));
      }
    }
    return;
  }
  float amax = 0.0f;
  for (int i = lane; i < head_dim; i += 32) {
    const float a = fabsf(x[i]);
    if (a <= 3.402823466e38f) amax = fmaxf(amax, a);  // finite values only
  }
  amax = warp_reduce<true>(amax);
  const bool int8 = t.code == kKvInt8, e4m3 = t.code == kKvE4M3;
  const std::uint16_t stored =
      int8 ? f16_saturating(amax / 127.0f) : bf16_saturating(amax / (e4m3 ? 448.0f : 57344.0f));
  const float scale = int8 ? f16_value(stored) : bf16_value(stored);
  if (lane == 0) {
    auto* scales = reinterpret_cast<std::uint16_t*>(tile + static_cast<long>(block_size) * kv_dim);
    scales[static_cast<long>(offset) * kv_heads + head] = stored;
    if (trace_tile >= 0)
      simt::trace_store(scales + static_cast<long>(offset) * kv_heads + head, 2, trace_what + 1,
                        trace_tile, simt::trace_key(41, 0, 0));
  }
  for (int i = lane; i < head_dim; i += 32) {
    if (int8) {
      float c = scale > 0.0f ? rintf(x[i] / scale) : 0.0f;
      if (c != c) c = 0.0f;
      c = fminf(fmaxf(c, -127.0f), 127.0f);
      reinterpret_cast<signed char*>(tile)[first + i] = static_cast<signed char>(c);
    } else {
      tile[first + i] = fp8_encode(scale > 0.0f ? x[i] / scale : 0.0f, e4m3);
    }
    if (trace_tile >= 0)
      simt::trace_store(tile + first + i, 1, trace_what, trace_tile,
                        simt::trace_key(40, i / 32, 0));
  }
}

// A token's whole row x [kv_dim] into row `offset` of `tile`, for int4 / int2. Called by the whole
// block (it has a block barrier).
KVS_DEVICE void store_groups(const KvTiles& t, unsigned char* tile, int offset, int block_size,
                             const float* x, int kv_dim, int trace_tile = -1,
                             unsigned trace_what = simt::kTraceKCodes) {
  const int bits = kv_code_bits(t.code), per_byte = 8 / bits, g = t.group;
  const int groups = kv_dim / g;
  const float levels = static_cast<float>((1 << bits) - 1);
  const long row_bytes = static_cast<long>(kv_dim) * bits / 8;
  auto* meta = reinterpret_cast<std::uint16_t*>(tile + static_cast<long>(block_size) * row_bytes +
                                                static_cast<long>(offset) * groups * 4);
  const int tid = static_cast<int>(simt::tid_x()), nt = static_cast<int>(simt::bdim_x());
  for (int k = tid; k < groups; k += nt) {  // each group's scale and zero
    asym_fit(x + static_cast<long>(k) * g, g, 1, levels, &meta[2 * k], &meta[2 * k + 1]);
    if (trace_tile >= 0)
      simt::trace_store(&meta[2 * k], 4, trace_what + 1, trace_tile,
                        simt::trace_key(42, (k - tid) / nt, 0));
  }
  simt::sync_block();  // every group's scale and zero are in place
  unsigned char* codes = tile + static_cast<long>(offset) * row_bytes;
  for (long b = tid; b < row_bytes; b += nt) {
    unsigned byte = 0;
    for (int j = 0; j < per_byte; ++j) {
      const long i = b * per_byte + j;
      const float scale = f16_value(meta[2 * (i / g)]), zero = f16_value(meta[2 * (i / g) + 1]);
      byte |= asym_code(x[i], scale, zero, levels) << (j * bits);
    }
    codes[b] = static_cast<unsigned char>(byte);
    if (trace_tile >= 0)
      simt::trace_store(codes + b, 1, trace_what, trace_tile,
                        simt::trace_key(43, (b - tid) / nt, 0));
  }
}

// The block-table entry a write kernel reads, and what its thread block writes, for the memory
// trace: row `row` (0 K, 1 V) of `slot`, KV head `head` (-1: the whole row).
KVS_DEVICE void trace_write(const int* block_table, int slot, int block_size, int row, int head) {
  simt::trace_load(block_table + slot / block_size, 4, simt::kTraceTable, -1,
                   simt::trace_key(44, 0, 0));
  if (simt::tid_x() == 0) simt::trace_write_role(row, head, slot, block_table, block_size);
}

// Grid (kv_heads, 2): K in y = 0, V in y = 1. Grid (kv_heads, 1): one row, `row` (0 K, 1 V; for
// the trace: the kernel writes whichever tiles it is given).
KVS_GLOBAL void kv_write_kernel(KvTiles k_tiles, KvTiles v_tiles, const int* block_table, int slot,
                                int block_size, const float* k, const float* v, int kv_heads,
                                int head_dim, int row) {
  const bool is_v = simt::bid_y() == 1u;
  const KvTiles t = is_v ? v_tiles : k_tiles;
  const int block = block_table[slot / block_size];
  unsigned char* tile = t.base + static_cast<long>(block) * t.tile_bytes;
  const int head = static_cast<int>(simt::bid_x());
  const int traced_row = is_v ? 1 : row;
  trace_write(block_table, slot, block_size, traced_row, head);
  store_head(t, tile, slot % block_size, block_size, head, is_v ? v : k, kv_heads, head_dim, block,
             traced_row == 1 ? simt::kTraceVCodes : simt::kTraceKCodes);
}

// int4 / int2: one row (`row`: 0 K, 1 V) of the token at `slot`; one warp.
KVS_GLOBAL void kv_write_groups_kernel(KvTiles t, const int* block_table, int slot, int block_size,
                                       const float* x, int kv_dim, int row) {
  const int block = block_table[slot / block_size];
  unsigned char* tile = t.base + static_cast<long>(block) * t.tile_bytes;
  trace_write(block_table, slot, block_size, row, -1);
  store_groups(t, tile, slot % block_size, block_size, x, kv_dim, block,
               row == 1 ? simt::kTraceVCodes : simt::kTraceKCodes);
}

// Tiles with base == nullptr are skipped (a KIVI kind: its token goes to the group's staging).
inline void launch_kv_write(const KvTiles& k_tiles, const KvTiles& v_tiles, const int* block_table,
                            int slot, int block_size, const float* k, const float* v, int kv_heads,
                            int head_dim) {
  const bool k_groups = kv_grouped(k_tiles.code), v_groups = kv_grouped(v_tiles.code);
  const bool both = k_tiles.base != nullptr && v_tiles.base != nullptr;
  if (both && !k_groups && !v_groups) {
    KVS_LAUNCH(kv_write_kernel, simt::Dim3(static_cast<unsigned>(kv_heads), 2), simt::Dim3(32), 0,
               k_tiles, v_tiles, block_table, slot, block_size, k, v, kv_heads, head_dim, 0);
    return;
  }
  // Each row alone, by the kernel of its format (the per-head kernel with grid y = 1 writes K).
  const int kv_dim = kv_heads * head_dim;
  for (int kind = 0; kind < 2; ++kind) {
    const KvTiles& t = kind == 0 ? k_tiles : v_tiles;
    const float* x = kind == 0 ? k : v;
    if (t.base == nullptr) continue;
    if (kv_grouped(t.code)) {
      KVS_LAUNCH(kv_write_groups_kernel, simt::Dim3(1), simt::Dim3(32), 0, t, block_table, slot,
                 block_size, x, kv_dim, kind);
    } else {
      KVS_LAUNCH(kv_write_kernel, simt::Dim3(static_cast<unsigned>(kv_heads), 1), simt::Dim3(32), 0,
                 t, t, block_table, slot, block_size, x, x, kv_heads, head_dim, kind);
    }
  }
}

KVS_KERNELS_END

// KIVI's group hand-over on the device: when the last token of a group of `residual` slots is
// written, the group's full-precision staging rows [residual][kv_dim] are quantized into the
// tiles. Keys per channel over the group (KIVI's outlier channels get their own range): one
// thread per byte of a row owns the channels packed into it, fits each channel's fp16 zero (its
// minimum) and scale, stores the pair into every tile the group touches (its set: a tile of
// block_size >= residual holds block_size / residual sets, a smaller tile a full copy of its
// group's), then packs that byte of every token's row (no two threads share a byte). Values per
// token, as int4 / int2 are written (kv_write.cuh's store_groups): one block per token.
// CPU twin: quant::write_token's flush (engine/quant/kv_codec.cpp); the bytes are the CPU's, bit
// for bit (tests/kernels/kernel_parity_test.cpp).
#pragma once

#include "kernels/ops/kv_write.cuh"

KVS_KERNELS_BEGIN

// The key group starting at slot g0 (a multiple of residual) of the sequence whose block table
// is `block_table`: staging [residual][kv_dim] into t (kKvKiviKey4 / kKvKiviKey2).
KVS_GLOBAL void kivi_flush_keys_kernel(KvTiles t, const int* block_table, int g0, int block_size,
                                       const float* staging, int kv_dim) {
  const int bits = kv_code_bits(t.code), per_byte = 8 / bits, R = t.residual;
  const float levels = static_cast<float>((1 << bits) - 1);
  const long row_bytes = static_cast<long>(kv_dim) * bits / 8;
  const int set = block_size >= R ? (g0 % block_size) / R : 0;
  const int first_block = g0 / block_size, last_block = (g0 + R - 1) / block_size;
  const int tid = static_cast<int>(simt::tid_x()), nt = static_cast<int>(simt::bdim_x());
  for (long b = tid; b < row_bytes; b += nt) {
    // The byte's per_byte <= 4 channels; constant trip counts, so the arrays stay in registers.
    float scale[4] = {0.0f, 0.0f, 0.0f, 0.0f}, zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int j = 0; j < 4; ++j) {
      if (j >= per_byte) continue;
      const int c = static_cast<int>(b) * per_byte + j;
      std::uint16_t s = 0, z = 0;
      asym_fit(staging + c, R, kv_dim, levels, &s, &z);  // channel c over the group's tokens
      for (int blk = first_block; blk <= last_block; ++blk) {
        auto* meta = reinterpret_cast<std::uint16_t*>(
            t.base + static_cast<long>(block_table[blk]) * t.tile_bytes +
            static_cast<long>(block_size) * row_bytes + (static_cast<long>(set) * kv_dim + c) * 4);
        meta[0] = s;
        meta[1] = z;
      }
      scale[j] = f16_value(s);
      zero[j] = f16_value(z);
    }
    for (int i = 0; i < R; ++i) {
      const float* x = staging + static_cast<long>(i) * kv_dim;
      unsigned byte = 0;
      for (int j = 0; j < 4; ++j) {
        if (j < per_byte)
          byte |= asym_code(x[b * per_byte + j], scale[j], zero[j], levels) << (j * bits);
      }
      const int slot = g0 + i;
      t.base[static_cast<long>(block_table[slot / block_size]) * t.tile_bytes +
             static_cast<long>(slot % block_size) * row_bytes + b] =
          static_cast<unsigned char>(byte);
    }
  }
}

// The value group starting at slot g0: token i of staging into its slot, per token (block i).
KVS_GLOBAL void kivi_flush_values_kernel(KvTiles t, const int* block_table, int g0, int block_size,
                                         const float* staging, int kv_dim) {
  const int i = static_cast<int>(simt::bid_x()), slot = g0 + i;
  unsigned char* tile = t.base + static_cast<long>(block_table[slot / block_size]) * t.tile_bytes;
  store_groups(t, tile, slot % block_size, block_size, staging + static_cast<long>(i) * kv_dim,
               kv_dim);
}

// Quantizes a filled group of K (key = true; t.code kKvKiviKey4 / 2) or V (t.code kKvInt4 / 2,
// t.residual the group) from its staging rows (device memory) into the tiles.
inline void launch_kivi_flush(const KvTiles& t, bool key, const int* block_table, int g0,
                              int block_size, const float* staging, int kv_dim) {
  if (key) {
    KVS_LAUNCH(kivi_flush_keys_kernel, simt::Dim3(1), simt::Dim3(128), 0, t, block_table, g0,
               block_size, staging, kv_dim);
  } else {
    KVS_LAUNCH(kivi_flush_values_kernel, simt::Dim3(static_cast<unsigned>(t.residual)),
               simt::Dim3(32), 0, t, block_table, g0, block_size, staging, kv_dim);
  }
}

KVS_KERNELS_END

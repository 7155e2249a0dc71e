// One token's K and V rows [kv_dim] into its slot of an fp32 paged pool: row `slot % block_size`
// of the tile of block_table[slot / block_size] (layout: kernels/ops/paged_attention.cuh).
// Quantize-on-write for the other KV formats is not written yet.
// CPU twin: cpu::kv_write on an fp32 pool.
#pragma once

#include "kernels/common/simt_api.cuh"

KVS_KERNELS_BEGIN

KVS_GLOBAL void kv_write_kernel(float* k_tiles, float* v_tiles, long tile_floats,
                                const int* block_table, int slot, int block_size, const float* k,
                                const float* v, int kv_dim) {
  const long base = static_cast<long>(block_table[slot / block_size]) * tile_floats +
                    static_cast<long>(slot % block_size) * kv_dim;
  for (int i = static_cast<int>(simt::tid_x()); i < kv_dim; i += static_cast<int>(simt::bdim_x())) {
    k_tiles[base + i] = k[i];
    v_tiles[base + i] = v[i];
  }
}

inline void launch_kv_write(float* k_tiles, float* v_tiles, long tile_floats,
                            const int* block_table, int slot, int block_size, const float* k,
                            const float* v, int kv_dim) {
  KVS_LAUNCH(kv_write_kernel, simt::Dim3(1), simt::Dim3(128), 0, k_tiles, v_tiles, tile_floats,
             block_table, slot, block_size, k, v, kv_dim);
}

KVS_KERNELS_END

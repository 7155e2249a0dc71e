// Token eviction's position shift on the device (llama.cpp's context shift): cached keys are
// rotated by a further `delta` positions in place, in every layer, and stored again in the pool's
// format. RoPE by p then by delta is RoPE by p + delta (rotations of a pair compose), so a key
// cached at position p ends at p + delta without its pre-RoPE value. One warp per (token, layer):
// the row is dequantized into shared memory, its pairs rotated (rope.cuh's arithmetic), and the
// row written back as kv_write writes it (per-head scales, or int4 / int2 groups re-fitted).
// rot[3 i .. 3 i + 2] = {physical block, row in the block, delta} of token i.
// CPU twin: TokenEvictor's host rotation (cpu::rope on the dequantized row, quant::write_token).
#pragma once

#include "kernels/ops/kv_write.cuh"
#include "kernels/ops/rope.cuh"

KVS_KERNELS_BEGIN

// k_tiles: layer 0's K tiles; layer l's start layer_stride bytes further per layer.
KVS_GLOBAL void kv_rotate_keys_kernel(KvTiles k_tiles, long layer_stride, const int* rot,
                                      int block_size, int kv_heads, int head_dim, float theta) {
  KVS_DYNAMIC_SHARED(float, row);  // [kv_dim]
  const int i = static_cast<int>(simt::bid_x()), layer = static_cast<int>(simt::bid_y());
  const int tid = static_cast<int>(simt::tid_x()), nt = static_cast<int>(simt::bdim_x());
  KvTiles t = k_tiles;
  t.base += static_cast<long>(layer) * layer_stride;
  const int block = rot[3 * i], offset = rot[3 * i + 1], delta = rot[3 * i + 2];
  const int kv_dim = kv_heads * head_dim;
  for (int e = tid; e < kv_dim; e += nt)
    row[e] = kv_load(t, block, offset, e, e / head_dim, kv_dim, kv_heads, block_size);
  simt::sync_block();
  for (int p = tid; p < kv_dim / 2; p += nt)
    rope_pair(row + 2 * p, (2 * p) % head_dim, delta, head_dim, theta);
  simt::sync_block();
  unsigned char* tile = t.base + static_cast<long>(block) * t.tile_bytes;
  if (kv_grouped(t.code)) {
    store_groups(t, tile, offset, block_size, row, kv_dim);
    return;
  }
  for (int h = 0; h < kv_heads; ++h)
    store_head(t, tile, offset, block_size, h, row, kv_heads, head_dim);
}

// `count` tokens' keys in all n_layers layers; rot as above, in device memory.
inline void launch_kv_rotate_keys(const KvTiles& k_tiles, long layer_stride, int n_layers,
                                  const int* rot, int count, int block_size, int kv_heads,
                                  int head_dim, float theta) {
  if (count == 0) return;
  KVS_LAUNCH(kv_rotate_keys_kernel,
             simt::Dim3(static_cast<unsigned>(count), static_cast<unsigned>(n_layers)),
             simt::Dim3(32), static_cast<std::size_t>(kv_heads) * head_dim * sizeof(float), k_tiles,
             layer_stride, rot, block_size, kv_heads, head_dim, theta);
}

KVS_KERNELS_END

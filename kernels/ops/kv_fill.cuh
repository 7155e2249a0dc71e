// Synthetic K/V for benchmarks (kvscope bench attention): fills every slot of a pool's tiles
// with finite pseudo-random values in the pool's format, straight on the device (a 32K-token,
// 64-sequence pool is gigabytes; encoding it on the host and uploading it would dominate). Values
// come from a hash of (tile byte, seed): codes of magnitude below 1 for the float formats, codes
// in [-127, 127] with a scale of 1/128 for int8, finite FP8 codes with a scale of 1/16, packed
// int4 / int2 codes with a scale of 1/16 and a zero of -1/2 per group.
// Not a twin of any CPU op: what it writes only has to be valid input for attention.
#pragma once

#include "kernels/common/kv_formats.cuh"

KVS_KERNELS_BEGIN

KVS_HOST_DEVICE std::uint32_t kv_hash(std::uint64_t i, std::uint32_t seed) {
  std::uint64_t x = i * 0x9E3779B97F4A7C15ull + seed;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return static_cast<std::uint32_t>(x);
}

// One tile per block (grid-stride over tiles), threads over its value codes and scales.
KVS_GLOBAL void kv_fill_kernel(KvTiles t, long num_blocks, int block_size, int kv_heads,
                               int head_dim, std::uint32_t seed) {
  const long values = static_cast<long>(block_size) * kv_heads * head_dim;
  for (long b = simt::bid_x(); b < num_blocks; b += simt::gdim_x()) {
    unsigned char* tile = t.base + b * t.tile_bytes;
    if (kv_grouped(t.code)) {
      const long code_bytes = values * (t.code == kKvInt4 ? 4 : 2) / 8;
      for (long i = simt::tid_x(); i < code_bytes; i += simt::bdim_x())
        tile[i] =
            static_cast<unsigned char>(kv_hash(static_cast<std::uint64_t>(b) * values + i, seed));
      auto* meta = reinterpret_cast<std::uint16_t*>(tile + code_bytes);
      const long groups = values / t.group;  // every token's groups, one after the other
      for (long i = simt::tid_x(); i < groups; i += simt::bdim_x()) {
        meta[2 * i] = f16_saturating(0.0625f);
        meta[2 * i + 1] = f16_saturating(-0.5f);
      }
      continue;
    }
    for (long i = simt::tid_x(); i < values; i += simt::bdim_x()) {
      const std::uint32_t h = kv_hash(static_cast<std::uint64_t>(b) * values + i, seed);
      const float u = static_cast<float>(h & 0xFFFFu) / 32768.0f - 1.0f;  // [-1, 1)
      switch (t.code) {
        case kKvF32:
          reinterpret_cast<float*>(tile)[i] = u;
          break;
        case kKvF16:
          reinterpret_cast<std::uint16_t*>(tile)[i] = f16_saturating(u);
          break;
        case kKvBF16:
          reinterpret_cast<std::uint16_t*>(tile)[i] = bf16_saturating(u);
          break;
        case kKvInt8:
          reinterpret_cast<signed char*>(tile)[i] = static_cast<signed char>(u * 127.0f);
          break;
        default:
          tile[i] = static_cast<unsigned char>((h & 0x80u) | ((h >> 8) % 0x70u));  // finite
          break;
      }
    }
    if (!kv_has_scale(t.code)) continue;
    auto* scales = reinterpret_cast<std::uint16_t*>(tile + values);  // 1-byte codes
    for (long i = simt::tid_x(); i < static_cast<long>(block_size) * kv_heads; i += simt::bdim_x())
      scales[i] = t.code == kKvInt8 ? f16_saturating(1.0f / 128.0f) : bf16_saturating(0.0625f);
  }
}

inline void launch_kv_fill(const KvTiles& t, long num_blocks, int block_size, int kv_heads,
                           int head_dim, std::uint32_t seed) {
  const long grid = num_blocks < 1024 ? (num_blocks < 1 ? 1 : num_blocks) : 1024;
  KVS_LAUNCH(kv_fill_kernel, simt::Dim3(static_cast<unsigned>(grid)), simt::Dim3(256), 0, t,
             num_blocks, block_size, kv_heads, head_dim, seed);
}

KVS_KERNELS_END

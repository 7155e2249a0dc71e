// The per-token K/V formats as the kernels read and write them, bit for bit the CPU's
// (engine/quant/float_formats.cpp, int_codec.cpp, kv_codec.cpp): fp32, fp16 and bf16 (round to
// nearest even, saturating), int8 (symmetric, one fp16 scale per token per KV head), OCP FP8
// E4M3 / E5M2 (one bf16 scale per token per KV head), int4 / int2 (asymmetric, an fp16 scale
// and zero per group of a token's row, codes packed low bits first) and KIVI's closed groups:
// keys per channel (an fp16 scale and zero per channel per group of `residual` tokens, kept per
// tile), values per token exactly as int4 / int2. Pure arithmetic, so the same functions run on
// the GPU and on the emulator.
//
// Tile layout (engine/kv/kv_format.h): [block_size][row_bytes] codes, then
// [block_size][token_meta_bytes] per-token scales, then (KIVI keys) max(1, block_size / residual)
// sets of [kv_dim] (scale, zero) pairs; a row is [kv_heads][head_dim] values.
#pragma once

#include "kernels/common/simt_api.cuh"

KVS_KERNELS_BEGIN

// kKvKiviKey4 / kKvKiviKey2: KIVI key tiles (per channel); KIVI value tiles are kKvInt4 / kKvInt2.
enum KvCode : int {
  kKvF32 = 0,
  kKvF16,
  kKvBF16,
  kKvInt8,
  kKvE4M3,
  kKvE5M2,
  kKvInt4,
  kKvInt2,
  kKvKiviKey4,
  kKvKiviKey2
};

// Whether a per-token, per-head 16-bit scale follows the 1-byte codes (int8, FP8).
KVS_HOST_DEVICE bool kv_has_scale(int code) {
  return code == kKvInt8 || code == kKvE4M3 || code == kKvE5M2;
}
// Whether the codes are packed sub-byte values with a scale and zero per group (int4, int2).
KVS_HOST_DEVICE bool kv_grouped(int code) {
  return code == kKvInt4 || code == kKvInt2;
}
KVS_HOST_DEVICE int kv_code_bits(int code) {
  return code == kKvInt4 || code == kKvKiviKey4 ? 4 : 2;  // the packed formats
}

// One layer's K or V tiles in one format.
struct KvTiles {
  unsigned char* base = nullptr;  // tile of physical block 0
  long tile_bytes = 0;
  int code = kKvF32;
  int group = 0;  // int4 / int2: values per group along a row (the format's effective group)
  // KIVI (keys and values): tokens per group. The open group of a sequence (its last
  // num_slots % residual tokens) is not in the tiles but in full-precision staging rows.
  int residual = 0;
};

KVS_HOST_DEVICE std::uint32_t float_bits(float x) {
  std::uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}
KVS_HOST_DEVICE float bits_float(std::uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

// Decoding is exact in every format (each fp16, bf16 and FP8 value is a float), so on the GPU
// the hardware's conversions give the same floats as the bit arithmetic the emulator runs.
KVS_HOST_DEVICE float f16_value(std::uint16_t h) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(h));
#else
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  if (exp == 0) {
    const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7F800000u | (mant << 13));
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
#endif
}
KVS_HOST_DEVICE float bf16_value(std::uint16_t b) {
  return bits_float(static_cast<std::uint32_t>(b) << 16);
}

// Saturating encoders (a value beyond the largest finite one, infinity included, becomes it).
KVS_HOST_DEVICE std::uint16_t f16_saturating(float x) {
  const std::uint32_t bits = float_bits(x);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t ax = bits & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u);
  if (ax >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7BFFu);
  if (ax < 0x38800000u) {
    const float steps = rintf(bits_float(ax) * 16777216.0f);
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(steps));
  }
  const std::uint32_t mant = ax & 0x7FFFFFu;
  std::uint32_t h = (((ax >> 23) - 112u) << 10) | (mant >> 13);
  const std::uint32_t rest = mant & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}
KVS_HOST_DEVICE std::uint16_t bf16_saturating(float x) {
  const std::uint32_t bits = float_bits(x);
  const std::uint32_t ax = bits & 0x7FFFFFFFu;
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  if (ax > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7FC0u);
  const std::uint32_t rounded = ax + 0x7FFFu + ((ax >> 16) & 1u);
  if (rounded >= 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7F7Fu);
  return static_cast<std::uint16_t>(sign | (rounded >> 16));
}

// The value of a positive FP8 code (0..0x7F); E4M3 has no infinities (0x7F is NaN).
KVS_HOST_DEVICE float fp8_value(int code, bool e4m3) {
  const int e = e4m3 ? (code >> 3) & 0xF : (code >> 2) & 0x1F;
  const int m = e4m3 ? code & 7 : code & 3;
  const float mant_scale = e4m3 ? 0.125f : 0.25f;
  if (e == 0) return ldexpf(static_cast<float>(m), e4m3 ? -9 : -16);
  return ldexpf(1.0f + static_cast<float>(m) * mant_scale, e - (e4m3 ? 7 : 15));
}
KVS_HOST_DEVICE float fp8_decode(unsigned c, bool e4m3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890  // FP8 conversions in hardware (Ada, Hopper)
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c & 0xFFu),
                                               e4m3 ? __NV_E4M3 : __NV_E5M2);
  return __half2float(__half(h));
#else
  const int code = static_cast<int>(c & 0x7Fu);
  float v;
  if (e4m3 && code == 0x7F)
    v = NAN;
  else if (!e4m3 && code >= 0x7C)
    v = code == 0x7C ? INFINITY : NAN;
  else
    v = fp8_value(code, e4m3);
  return (c & 0x80u) ? -v : v;
#endif
}
// Nearest code, ties to the even code; saturating; NaN to the format's NaN.
KVS_HOST_DEVICE std::uint8_t fp8_encode(float x, bool e4m3) {
  const unsigned sign = (float_bits(x) & 0x80000000u) ? 0x80u : 0u;
  const int max_code = e4m3 ? 0x7E : 0x7B;
  if (x != x) return static_cast<std::uint8_t>(sign | (e4m3 ? 0x7Fu : 0x7Eu));
  const float a = fabsf(x);
  if (a >= fp8_value(max_code, e4m3)) return static_cast<std::uint8_t>(sign | max_code);
  int lo = 0, hi = max_code;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (fp8_value(mid, e4m3) <= a)
      lo = mid;
    else
      hi = mid;
  }
  const float dl = a - fp8_value(lo, e4m3), dh = fp8_value(hi, e4m3) - a;
  const int code = dl < dh ? lo : (dh < dl ? hi : ((lo & 1) == 0 ? lo : hi));
  if (code == 0) return static_cast<std::uint8_t>(sign);
  return static_cast<std::uint8_t>(sign | static_cast<unsigned>(code));
}

// The b-bit asymmetric fit of n values x[0], x[stride], ... (finite ones only; none: 0 and 0):
// the fp16 zero (their minimum) and the fp16 scale, the range stretched by the zero's rounding so
// the maximum stays representable. The CPU's quant::asym_params (int_codec.cpp), bit for bit.
KVS_DEVICE void asym_fit(const float* x, int n, long stride, float levels, std::uint16_t* scale,
                         std::uint16_t* zero) {
  float lo = INFINITY, hi = -INFINITY;
  for (int i = 0; i < n; ++i) {
    const float v = x[i * stride];
    if (fabsf(v) <= 3.402823466e38f) {
      lo = fminf(lo, v);
      hi = fmaxf(hi, v);
    }
  }
  if (lo > hi) lo = hi = 0.0f;
  *zero = f16_saturating(lo);
  *scale = f16_saturating(fmaxf(0.0f, hi - f16_value(*zero)) / levels);
}
// The code of x under a fit's decoded scale and zero: 0 for a zero scale or NaN, else clamped.
KVS_DEVICE unsigned asym_code(float x, float scale, float zero, float levels) {
  if (!(scale > 0.0f)) return 0;
  float q = rintf((x - zero) / scale);
  if (q != q) q = 0.0f;
  return static_cast<unsigned>(fminf(fmaxf(q, 0.0f), levels));
}
// Packed code e (bits wide, low bits first) of the row at `offset` of a tile of rows of kv_dim
// codes.
KVS_DEVICE unsigned packed_code(const unsigned char* tile, int offset, int e, int kv_dim,
                                int bits) {
  const long row_bytes = static_cast<long>(kv_dim) * bits / 8;
  const unsigned byte = tile[static_cast<long>(offset) * row_bytes + e * bits / 8];
  return (byte >> ((e % (8 / bits)) * bits)) & ((1u << bits) - 1u);
}

// Value e of the row at `offset` of physical block `block` (row: kv_heads x head_dim). With a
// non-zero trace key, its loads are recorded for the memory trace as `what` (the codes) and
// what + 1 (the scales), simt::trace_load.
KVS_DEVICE float kv_load(const KvTiles& t, int block, int offset, int e, int head, int kv_dim,
                         int kv_heads, int block_size, unsigned what = simt::kTraceKCodes,
                         std::uint64_t key = 0) {
  const unsigned char* tile = t.base + static_cast<long>(block) * t.tile_bytes;
  const long i = static_cast<long>(offset) * kv_dim + e;
  const auto traced = [&](const void* p, unsigned bytes, unsigned w) {
    if (key != 0) simt::trace_load(p, bytes, w, block, key);
  };
  switch (t.code) {
    case kKvF32:
      traced(tile + i * 4, 4, what);
      return reinterpret_cast<const float*>(tile)[i];
    case kKvF16:
      traced(tile + i * 2, 2, what);
      return f16_value(reinterpret_cast<const std::uint16_t*>(tile)[i]);
    case kKvBF16:
      traced(tile + i * 2, 2, what);
      return bf16_value(reinterpret_cast<const std::uint16_t*>(tile)[i]);
    case kKvKiviKey4:
    case kKvKiviKey2: {  // per channel: the (scale, zero) of channel e in the token's group set
      const int bits = kv_code_bits(t.code);
      const long row_bytes = static_cast<long>(kv_dim) * bits / 8;
      const unsigned c = packed_code(tile, offset, e, kv_dim, bits);
      const int set = block_size >= t.residual ? offset / t.residual : 0;
      const auto* meta =
          reinterpret_cast<const std::uint16_t*>(tile + static_cast<long>(block_size) * row_bytes +
                                                 (static_cast<long>(set) * kv_dim + e) * 4);
      traced(tile + static_cast<long>(offset) * row_bytes + e * bits / 8, 1, what);
      traced(meta, 4, what + 1);
      return static_cast<float>(c) * f16_value(meta[0]) + f16_value(meta[1]);
    }
    case kKvInt4:
    case kKvInt2: {
      const int bits = kv_code_bits(t.code);
      const long row_bytes = static_cast<long>(kv_dim) * bits / 8;
      const unsigned c = packed_code(tile, offset, e, kv_dim, bits);
      const long groups = kv_dim / t.group;
      const auto* meta = reinterpret_cast<const std::uint16_t*>(
          tile + static_cast<long>(block_size) * row_bytes + (offset * groups + e / t.group) * 4);
      traced(tile + static_cast<long>(offset) * row_bytes + e * bits / 8, 1, what);
      traced(meta, 4, what + 1);
      return static_cast<float>(c) * f16_value(meta[0]) + f16_value(meta[1]);
    }
    default: {
      const auto* scales = reinterpret_cast<const std::uint16_t*>(
          tile + static_cast<long>(block_size) * kv_dim);  // 1-byte codes
      const std::uint16_t s = scales[static_cast<long>(offset) * kv_heads + head];
      traced(tile + i, 1, what);
      traced(scales + static_cast<long>(offset) * kv_heads + head, 2, what + 1);
      if (t.code == kKvInt8)
        return static_cast<float>(reinterpret_cast<const signed char*>(tile)[i]) * f16_value(s);
      return fp8_decode(tile[i], t.code == kKvE4M3) * bf16_value(s);
    }
  }
}

KVS_KERNELS_END

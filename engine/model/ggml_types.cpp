// ggml type table and block dequantizers, written from ggml's block layouts (ggml-common.h) and
// reference formulas (ggml-quants.c), in ggml's float operation order so results match bit for bit.
#include "engine/model/ggml_types.h"

#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <string>

#include "engine/common/error.h"
#include "engine/quant/float_formats.h"

namespace kvscope {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF tensor data is little-endian; the loads below assume a little-endian host");

// One row of the type table; name == nullptr marks an id ggml does not define.
struct TypeRow {
  const char* name = nullptr;
  int block_elems = 0;  // elements per block
  int block_bytes = 0;  // bytes per block
};

constexpr std::uint32_t kTypeIdCount = 43;  // ggml type ids 0..42

// Every type ggml's ggml.h defines, by id (sizes from ggml-common.h's block structs).
constexpr std::array<TypeRow, kTypeIdCount> make_type_table() {
  std::array<TypeRow, kTypeIdCount> t{};
  t[0] = {"F32", 1, 4};
  t[1] = {"F16", 1, 2};
  t[2] = {"Q4_0", 32, 18};  // f16 d, 16 bytes of nibbles
  t[3] = {"Q4_1", 32, 20};  // f16 d, f16 m, 16 bytes of nibbles
  // 4 and 5 were Q4_2 and Q4_3, removed from ggml.
  t[6] = {"Q5_0", 32, 22};
  t[7] = {"Q5_1", 32, 24};
  t[8] = {"Q8_0", 32, 34};  // f16 d, 32 int8
  t[9] = {"Q8_1", 32, 36};  // f16 d, f16 s, 32 int8
  t[10] = {"Q2_K", 256, 84};
  t[11] = {"Q3_K", 256, 110};
  t[12] = {"Q4_K", 256,
           144};  // f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles
  t[13] = {"Q5_K", 256, 176};
  t[14] = {"Q6_K", 256, 210};  // 128 bytes ql, 64 bytes qh, 16 int8 scales, f16 d
  t[15] = {"Q8_K", 256, 292};
  t[16] = {"IQ2_XXS", 256, 66};
  t[17] = {"IQ2_XS", 256, 74};
  t[18] = {"IQ3_XXS", 256, 98};
  t[19] = {"IQ1_S", 256, 50};
  t[20] = {"IQ4_NL", 32, 18};
  t[21] = {"IQ3_S", 256, 110};
  t[22] = {"IQ2_S", 256, 82};
  t[23] = {"IQ4_XS", 256, 136};
  t[24] = {"I8", 1, 1};
  t[25] = {"I16", 1, 2};
  t[26] = {"I32", 1, 4};
  t[27] = {"I64", 1, 8};
  t[28] = {"F64", 1, 8};
  t[29] = {"IQ1_M", 256, 56};
  t[30] = {"BF16", 1, 2};
  // 31-33 (Q4_0_4_4, Q4_0_4_8, Q4_0_8_8) were removed from GGUF files.
  t[34] = {"TQ1_0", 256, 54};
  t[35] = {"TQ2_0", 256, 66};
  // 36-38 (IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8) likewise.
  t[39] = {"MXFP4", 32, 17};
  t[40] = {"NVFP4", 64, 36};
  t[41] = {"Q1_0", 128, 18};
  t[42] = {"Q2_0", 64, 18};
  return t;
}

constexpr std::array<TypeRow, kTypeIdCount> kTypeTable = make_type_table();

bool is_supported(std::uint32_t type_id) {
  switch (static_cast<GgmlType>(type_id)) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K:
    case GgmlType::kBF16:
      return true;
  }
  return false;
}

// "Q4_K (ggml type 12)", or "ggml type 99 (not a type ggml defines)".
std::string describe_type(std::uint32_t type_id) {
  const auto traits = ggml_type_traits(type_id);
  if (!traits) return "ggml type " + std::to_string(type_id) + " (not a type ggml defines)";
  return std::string(traits->name) + " (ggml type " + std::to_string(type_id) + ")";
}

// Throws unless n >= 0 and n is a multiple of the block size of `traits`.
void check_row_length(const char* where, const GgmlTypeTraits& traits, std::int64_t n) {
  if (n >= 0 && n % traits.block_elems == 0) return;
  fail_expected(where,
                "a non-negative element count that is a multiple of " + std::string(traits.name) +
                    "'s block size " + std::to_string(traits.block_elems),
                std::to_string(n));
}

// Unaligned little-endian loads from block bytes.
std::uint8_t u8_at(const std::byte* p, int i) {
  return std::to_integer<std::uint8_t>(p[i]);
}
std::int8_t i8_at(const std::byte* p, int i) {
  return static_cast<std::int8_t>(std::to_integer<std::uint8_t>(p[i]));
}
float f16_at(const std::byte* p) {
  std::uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return quant::f16_to_f32(h);
}

// The block decoders follow ggml's operation order. Every product in them is exact in float (an
// fp16 significand times small integers stays within 24 bits), so each output is rounded at most
// once and FMA contraction cannot change it.

// Q4_0, 32 elements: {f16 d; u8 qs[16]}. Byte j holds element j (low nibble) and j+16 (high);
// each is an unsigned nibble offset by 8.
void block_q4_0(const std::byte* b, float* y) {
  const float d = f16_at(b);
  const std::byte* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    const int q = u8_at(qs, j);
    y[j] = static_cast<float>((q & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>((q >> 4) - 8) * d;
  }
}

// Q4_1, 32 elements: {f16 d; f16 m; u8 qs[16]}, nibbles as in Q4_0 but x = q*d + m.
void block_q4_1(const std::byte* b, float* y) {
  const float d = f16_at(b);
  const float m = f16_at(b + 2);
  const std::byte* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    const int q = u8_at(qs, j);
    y[j] = static_cast<float>(q & 0xF) * d + m;
    y[j + 16] = static_cast<float>(q >> 4) * d + m;
  }
}

// Q8_0, 32 elements: {f16 d; i8 qs[32]}, x = q*d.
void block_q8_0(const std::byte* b, float* y) {
  const float d = f16_at(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(i8_at(b + 2, j)) * d;
}

// Scale and min (6 bits each) of sub-block j in [0, 8) from a K-quant's 12 packed bytes [12]:
// bytes 0-3 hold the scales of sub-blocks 0-3 in their low 6 bits, bytes 4-7 their mins; sub-blocks
// 4-7 keep their low 4 bits in bytes 8-11 (scale low nibble, min high nibble) and their top 2 bits
// in the top 2 bits of bytes 0-3 (scales) and 4-7 (mins).
void scale_min_k4(int j, const std::byte* packed, int& scale, int& min) {
  if (j < 4) {
    scale = u8_at(packed, j) & 63;
    min = u8_at(packed, j + 4) & 63;
  } else {
    scale = (u8_at(packed, j + 4) & 0xF) | ((u8_at(packed, j - 4) >> 6) << 4);
    min = (u8_at(packed, j + 4) >> 4) | ((u8_at(packed, j) >> 6) << 4);
  }
}

// Q4_K, 256 elements in 8 sub-blocks of 32: {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}.
// Sub-block s has x = (d*scale_s) * q - (dmin*min_s). Each 64-element chunk c uses qs[32c, 32c+32):
// low nibbles for sub-block 2c, then high nibbles for sub-block 2c+1.
void block_q4_k(const std::byte* b, float* y) {
  const float d = f16_at(b);
  const float dmin = f16_at(b + 2);
  const std::byte* scales = b + 4;
  const std::byte* qs = b + 16;
  for (int chunk = 0; chunk < 4; ++chunk) {
    int sc = 0, m = 0;
    scale_min_k4(2 * chunk, scales, sc, m);
    const float d_lo = d * static_cast<float>(sc);
    const float m_lo = dmin * static_cast<float>(m);
    scale_min_k4(2 * chunk + 1, scales, sc, m);
    const float d_hi = d * static_cast<float>(sc);
    const float m_hi = dmin * static_cast<float>(m);
    const std::byte* q = qs + 32 * chunk;
    float* out = y + 64 * chunk;
    for (int l = 0; l < 32; ++l) {
      out[l] = d_lo * static_cast<float>(u8_at(q, l) & 0xF) - m_lo;
      out[l + 32] = d_hi * static_cast<float>(u8_at(q, l) >> 4) - m_hi;
    }
  }
}

// Q6_K, 256 elements in 16 groups of 16 sharing an int8 scale:
// {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}, x = (d*scale) * (q - 32) with 6-bit q.
// Each 128-element half h reads ql[64h, 64h+64) and qh[32h, 32h+32); for l in [0, 32) byte qh[l]
// carries the top 2 bits of elements l, l+32, l+64, l+96 (bits 0-1, 2-3, 4-5, 6-7), whose low 4
// bits are the low nibbles of ql[l], ql[l+32], then the high nibbles of ql[l], ql[l+32].
void block_q6_k(const std::byte* b, float* y) {
  const float d = f16_at(b + 208);
  for (int half = 0; half < 2; ++half) {
    const std::byte* ql = b + 64 * half;
    const std::byte* qh = b + 128 + 32 * half;
    const std::byte* sc = b + 192 + 8 * half;
    float* out = y + 128 * half;
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int h = u8_at(qh, l);
      const int q1 = ((u8_at(ql, l) & 0xF) | (((h >> 0) & 3) << 4)) - 32;
      const int q2 = ((u8_at(ql, l + 32) & 0xF) | (((h >> 2) & 3) << 4)) - 32;
      const int q3 = ((u8_at(ql, l) >> 4) | (((h >> 4) & 3) << 4)) - 32;
      const int q4 = ((u8_at(ql, l + 32) >> 4) | (((h >> 6) & 3) << 4)) - 32;
      out[l] = d * static_cast<float>(i8_at(sc, is + 0)) * static_cast<float>(q1);
      out[l + 32] = d * static_cast<float>(i8_at(sc, is + 2)) * static_cast<float>(q2);
      out[l + 64] = d * static_cast<float>(i8_at(sc, is + 4)) * static_cast<float>(q3);
      out[l + 96] = d * static_cast<float>(i8_at(sc, is + 6)) * static_cast<float>(q4);
    }
  }
}

// Runs `decode(block_bytes, out)` over every block of the row.
template <typename BlockFn>
void for_each_block(const std::byte* src, float* dst, std::int64_t n, int block_elems,
                    int block_bytes, BlockFn decode) {
  for (std::int64_t i = 0; i < n / block_elems; ++i) {
    decode(src + i * block_bytes, dst + i * block_elems);
  }
}

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(std::uint32_t type_id) {
  if (type_id >= kTypeIdCount || kTypeTable[type_id].name == nullptr) return std::nullopt;
  const TypeRow& row = kTypeTable[type_id];
  return GgmlTypeTraits{row.name, row.block_elems, row.block_bytes, is_supported(type_id)};
}

std::int64_t ggml_row_bytes(std::uint32_t type_id, std::int64_t n) {
  const auto traits = ggml_type_traits(type_id);
  if (!traits) fail_expected("ggml_row_bytes", "a ggml tensor type id", describe_type(type_id));
  check_row_length("ggml_row_bytes", *traits, n);
  const std::int64_t blocks = n / traits->block_elems;
  if (blocks > std::numeric_limits<std::int64_t>::max() / traits->block_bytes) {
    fail_expected("ggml_row_bytes",
                  "a row of " + std::string(traits->name) + " whose byte size fits in int64",
                  std::to_string(n) + " elements");
  }
  return blocks * traits->block_bytes;
}

void dequantize_row(GgmlType type, const std::byte* src, float* dst, std::int64_t n) {
  const auto type_id = static_cast<std::uint32_t>(type);
  const auto traits = ggml_type_traits(type_id);
  if (!traits || !traits->supported) {
    fail_expected("dequantize_row",
                  "a type kvscope can dequantize (F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K)",
                  describe_type(type_id));
  }
  check_row_length("dequantize_row", *traits, n);
  const int elems = traits->block_elems, bytes = traits->block_bytes;
  switch (type) {
    case GgmlType::kF32:
      if (n > 0) std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(float));
      return;
    case GgmlType::kF16:
      for_each_block(src, dst, n, elems, bytes, [](const std::byte* b, float* y) {
        std::uint16_t h;
        std::memcpy(&h, b, sizeof h);
        *y = fp16_to_fp32(h);
      });
      return;
    case GgmlType::kBF16:
      for_each_block(src, dst, n, elems, bytes, [](const std::byte* b, float* y) {
        std::uint16_t h;
        std::memcpy(&h, b, sizeof h);
        *y = bf16_to_fp32(h);
      });
      return;
    case GgmlType::kQ4_0:
      return for_each_block(src, dst, n, elems, bytes, block_q4_0);
    case GgmlType::kQ4_1:
      return for_each_block(src, dst, n, elems, bytes, block_q4_1);
    case GgmlType::kQ8_0:
      return for_each_block(src, dst, n, elems, bytes, block_q8_0);
    case GgmlType::kQ4_K:
      return for_each_block(src, dst, n, elems, bytes, block_q4_k);
    case GgmlType::kQ6_K:
      return for_each_block(src, dst, n, elems, bytes, block_q6_k);
  }
}

void dequantize_rows(GgmlType type, const std::byte* src, std::int64_t row_bytes, std::int64_t rows,
                     std::int64_t cols, float* dst) {
#pragma omp parallel for schedule(static) if (rows >= 256)
  for (std::int64_t r = 0; r < rows; ++r)
    dequantize_row(type, src + r * row_bytes, dst + r * cols, cols);
}

bool has_native_matmul(GgmlType type) {
  return type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1 || type == GgmlType::kQ8_0;
}

float fp16_to_fp32(std::uint16_t h) {
  return quant::f16_to_f32(h);
}

float bf16_to_fp32(std::uint16_t h) {
  return quant::bf16_to_f32(h);
}

}  // namespace kvscope

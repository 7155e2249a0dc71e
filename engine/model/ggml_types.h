// ggml tensor types as GGUF files store them: the block size of every type id ggml defines, and
// dequantization of the types kvscope loads, bit-identical to ggml's reference (scalar) code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace kvscope {

// ggml's tensor type ids as stored in GGUF tensor infos (only the ones dequantize_row handles).
enum class GgmlType : std::uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ6_K = 14,
  kBF16 = 30,
};

struct GgmlTypeTraits {
  const char* name;  // ggml's name: "F32", "Q4_1", "Q4_K", ...
  int block_elems;   // elements per block (1 for F32/F16/BF16, 32 for Q4_0/Q4_1/Q8_0, 256 for
                     // K-quants)
  int block_bytes;   // bytes per block
  bool supported;    // whether dequantize_row handles it
};

// A weight matrix kept in a ggml block type as the file stores it: row r is `row_bytes` bytes at
// data + r * row_bytes (--weight-format native; data is null when the matrix is read as fp32).
struct QuantMatrix {
  GgmlType type = GgmlType::kF32;
  const std::byte* data = nullptr;
  std::int64_t row_bytes = 0;
  // The same rows repacked for the x86 SIMD kernels (engine/model/quant_panels.h); null where
  // those kernels do not run.
  const std::byte* panels = nullptr;
};

// Whether the CPU backend multiplies matrices of `type` in their blocks (Q4_0, Q4_1, Q8_0;
// engine/backend/cpu/quant_matmul.h); other types are read dequantized to fp32.
bool has_native_matmul(GgmlType type);

// The blocks of those three types (ggml-common.h): Q4_0 = f16 d, 16 bytes of nibbles; Q4_1 =
// f16 d, f16 m, 16 bytes of nibbles; Q8_0 = f16 d, 32 int8. Nibble j (< 16) is element j in its
// low half and element j + 16 in its high half. Bytes per block, and where its quants start:
constexpr int native_block_bytes(GgmlType t) {
  return t == GgmlType::kQ4_0 ? 18 : t == GgmlType::kQ4_1 ? 20 : 34;
}
constexpr int native_quants_offset(GgmlType t) {
  return t == GgmlType::kQ4_1 ? 4 : 2;
}

// Traits for any type id ggml defines, including the ones dequantize_row cannot decode (Q5_0, Q2_K,
// IQ*, I8..I64, F64, TQ*, MXFP4, ...), so errors can name them and sizes can be validated;
// std::nullopt for an id ggml does not define (never assigned, or retired like 4, 5, 31-33, 36-38).
std::optional<GgmlTypeTraits> ggml_type_traits(std::uint32_t type_id);

// Bytes of a row of `n` elements of any type ggml defines. Throws kvscope::Error for an unknown
// type id, a negative n, n not a multiple of the block size, or a byte count beyond int64.
std::int64_t ggml_row_bytes(std::uint32_t type_id, std::int64_t n);

// Dequantizes `n` elements (a multiple of the type's block size) from `src` (ggml_row_bytes(type,
// n) bytes, any alignment) to `dst` [n]. Throws kvscope::Error for a type it cannot decode or a bad
// n.
void dequantize_row(GgmlType type, const std::byte* src, float* dst, std::int64_t n);
// dequantize_row for `rows` rows of `cols` elements, `row_bytes` apart in `src`, into `dst`
// [rows][cols]; the rows spread over OpenMP's threads (from 256 rows).
void dequantize_rows(GgmlType type, const std::byte* src, std::int64_t row_bytes, std::int64_t rows,
                     std::int64_t cols, float* dst);

// IEEE binary16 and bfloat16 to float: exact, including subnormals, infinities and NaN payloads.
float fp16_to_fp32(std::uint16_t h);
float bf16_to_fp32(std::uint16_t h);

}  // namespace kvscope

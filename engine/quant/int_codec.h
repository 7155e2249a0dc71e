// Integer quantization primitives shared by the KV formats: bit packing of 8/4/2-bit codes,
// symmetric int8 with one scale, and asymmetric b-bit codes with a scale and a zero point (the
// group minimum). Scales and zero points are rounded to fp16 before codes are chosen, so what is
// decoded is exactly what the stored fp16 metadata says.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvscope::quant {

// Code `i` of a packed row of `bits`-bit codes (bits = 2, 4 or 8; low bits first in each byte).
inline unsigned get_code(const std::uint8_t* row, int i, int bits) {
  const int per_byte = 8 / bits;
  const unsigned shift = static_cast<unsigned>((i % per_byte) * bits);
  return (row[i / per_byte] >> shift) & ((1u << bits) - 1u);
}
inline void set_code(std::uint8_t* row, int i, int bits, unsigned code) {
  const int per_byte = 8 / bits;
  const unsigned shift = static_cast<unsigned>((i % per_byte) * bits);
  const unsigned mask = ((1u << bits) - 1u) << shift;
  std::uint8_t& b = row[i / per_byte];
  b = static_cast<std::uint8_t>((b & ~mask) | ((code << shift) & mask));
}

// Symmetric int8: scale = fp16(max|x| / 127); codes in [-127, 127]. Returns the fp16 scale bits.
// x[n] in, codes[n] out.
std::uint16_t quantize_int8(const float* x, int n, std::int8_t* codes);

// Asymmetric b-bit over n values read as x[i * stride]: zero = fp16(min), scale =
// fp16((max - min) / (2^b - 1)); codes written with set_code at positions first + i * code_stride
// of `row`. Returns {scale bits, zero bits}.
struct ScaleZero {
  std::uint16_t scale = 0;
  std::uint16_t zero = 0;
};
ScaleZero quantize_asym(const float* x, int n, int stride, int bits, std::uint8_t* row, int first);

// Asymmetric quantization of the same n values laid out in several rows: value i is
// x[i * stride] and goes to code `column` of rows[i] (used by KIVI's per-channel keys).
ScaleZero quantize_asym_column(const float* x, int n, int stride, int bits,
                               std::uint8_t* const* rows, int column);

}  // namespace kvscope::quant

// Scalar conversions between float and the narrow floating-point formats kvscope stores K/V in:
// IEEE binary16, bfloat16, and the OCP 8-bit formats E4M3 (bias 7, max 448, no infinities, one NaN
// code per sign) and E5M2 (bias 15, max 57344, IEEE-style infinities and NaNs). Every encoder
// rounds to nearest, ties to even, and saturates: a finite value (or infinity) beyond the largest
// finite number becomes that number with its sign, never infinity or NaN. NaN input stays NaN.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvscope::quant {

std::uint16_t f32_to_f16(float x);
float f16_to_f32(std::uint16_t h);
std::uint16_t f32_to_bf16(float x);
float bf16_to_f32(std::uint16_t b);

// n stored fp16 / bf16 values (little-endian, any alignment) to floats: bit for bit what the
// scalar functions give (for fp16 with F16C's vcvtph2ps, 8 at a time; the one difference, a
// signalling NaN coming out quiet, cannot occur in K/V, which f32_to_f16 encodes).
void f16_row_to_f32(const std::byte* src, float* dst, int n);
void bf16_row_to_f32(const std::byte* src, float* dst, int n);

inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE5M2Max = 57344.0f;

std::uint8_t f32_to_e4m3(float x);
float e4m3_to_f32(std::uint8_t c);
std::uint8_t f32_to_e5m2(float x);
float e5m2_to_f32(std::uint8_t c);

// Decoding tables [256] for the attention inner loop.
const float* e4m3_table();
const float* e5m2_table();

// Rounds through fp16 and back: what a stored fp16 scale or zero point really is.
inline float round_to_f16(float x) {
  return f16_to_f32(f32_to_f16(x));
}

}  // namespace kvscope::quant

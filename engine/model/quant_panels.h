// The layout the CPU backend's x86 SIMD kernels read quantized weights in
// (engine/backend/cpu/quant_matmul.h): a matrix's rows in panels of kPanelRows (the last one padded
// with zero rows), each panel its blocks in order, each block of the panel as
//   [quants: 4 x 64 bytes (Q4_0, Q4_1) or 8 x 64 (Q8_0)][16 fp16 scales][16 fp16 mins (Q4_1)]
// padded to a multiple of 64 bytes. Quant group k holds, for each of the 16 rows in turn, the
// 4 bytes the file stores at 4k..4k+3 of the row's block: for Q4 the nibbles of elements 4k..4k+3
// (low) and 4k+16..4k+19 (high), for Q8_0 elements 4k..4k+3 plus 128 (unsigned). One 32-bit
// broadcast of the activations then meets 16 rows at once. The GGUF loader makes them beside the
// blocks on x86 builds (quant_panels_made).
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/model/ggml_types.h"

namespace kvscope {

constexpr int kPanelRows = 16;

// Bytes of a panel block's quants, and of the whole block (padded to 64).
constexpr int panel_quant_bytes(GgmlType t) {
  return t == GgmlType::kQ8_0 ? 8 * 64 : 4 * 64;
}
constexpr int panel_block_bytes(GgmlType t) {
  return (panel_quant_bytes(t) + 2 * 2 * kPanelRows + 63) / 64 * 64;
}

// Whether this build's GGUF loader makes panels (x86, where the kernels that read them exist).
bool quant_panels_made();

// Bytes of the panels of a `rows` x `n` matrix of `type` (has_native_matmul).
std::size_t quant_panel_bytes(GgmlType type, std::int64_t rows, std::int64_t n);

// Writes the panels of the `rows` x `n` matrix at `w` (`row_bytes` apart) to `out`
// (quant_panel_bytes of it).
void make_quant_panels(GgmlType type, const std::byte* w, std::int64_t row_bytes, std::int64_t rows,
                       std::int64_t n, std::byte* out);

}  // namespace kvscope

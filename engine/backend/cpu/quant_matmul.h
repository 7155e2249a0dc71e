// Matmuls on weights kept in ggml's quantized blocks (Q4_0, Q4_1, Q8_0), as GGUF files store
// them: the activations are quantized per 32-element block to int8 and each block's dot product
// is an exact integer sum, scaled in float once per block. Four implementations (portable scalar,
// AVX2, AVX-512 VNNI, WebAssembly SIMD128), picked at run time, give bit-identical results,
// because they all compute the same exact integers and then the same float operations in the
// same order:
//
//   acc = 0
//   for each block b of the row, in order:
//     S = sum of w * xq over the block's 32 elements                   (an exact int32)
//     v = float(S) * (dw[b] * dx[b])
//     v = v + m[b] * sx[b]        (Q4_1's min only; sx = dx * float(sum of the block's xq))
//     acc = acc + v
//   result = acc
//
// Each product and each sum is rounded to float on its own (no fused multiply-add): WebAssembly
// has no fused multiply-add, and emulating one lane by lane in double made the browser build's
// kernel five times slower (docs/web.md). One float step per block and weight row, whatever the
// instruction set: the SIMD paths put 16 (AVX-512) or 8 (AVX2) weight rows' block sums in one
// register, so a handful of float operations serve 512 (256) multiply-adds, and different
// activation rows (and weight panels) are the independent chains that hide the latency. The x86
// paths read the weights repacked into panels of kPanelRows rows (engine/model/quant_panels.h);
// the portable and WebAssembly paths read the blocks as the file stores them. The result does not
// depend on how many activation rows are processed together, so a batched step stays
// bit-identical to its tokens run one by one (tests/backend/quant_matmul_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <string>

#include "engine/model/checkpoint.h"
#include "engine/model/ggml_types.h"
#include "engine/model/quant_panels.h"

namespace kvscope::cpu {

// Elements per quantization block, weights and activations alike.
constexpr int kQuantBlock = 32;

// Rows of activations quantized per block: q = round(x / d) with d = max|x| / 127 (0 for an
// all-zero block).
struct QuantizedActs {
  int m = 0;                      // rows
  int n = 0;                      // elements per row, a multiple of kQuantBlock
  std::vector<std::int8_t> q;     // [m][n]
  std::vector<float> d;           // [m][n / 32] block scales
  std::vector<std::int32_t> sum;  // [m][n / 32] the sum of each block's q: the zero-point
                                  // corrections of the unsigned-times-signed kernels
  std::vector<float> sx;          // [m][n / 32] d * float(sum): Q4_1's min term
};

// Quantizes the m rows of x [m][n] (n a multiple of 32) into `out`, reusing its storage.
void quantize_acts(const float* x, int m, int n, QuantizedActs& out);

// The instruction sets a quantized matmul can run on.
enum class QuantIsa { kScalar, kAvx2, kAvx512Vnni, kWasmSimd128 };
const char* quant_isa_name(QuantIsa isa);
// Whether this CPU runs `isa` (kScalar always).
bool quant_isa_supported(QuantIsa isa);
// The fastest supported one; KVSCOPE_QUANT_ISA=scalar|avx2|avx512vnni|wasm-simd128 asks for a
// slower one (for comparing them), and an unsupported or unknown value is ignored with one line
// on stderr.
QuantIsa best_quant_isa();

// Whether `isa` reads the matrix's panels (QuantMatrix::panels, engine/model/quant_panels.h),
// not its blocks.
bool quant_isa_uses_panels(QuantIsa isa);

// out[t * ldo + r] = (row r of W) . (row t of the activations), for rows r0 <= r < r1 of W and
// every row t < a.m, for a type with has_native_matmul(). W's rows are w.row_bytes apart from
// w.data, each a.n / 32 blocks of w.type; an isa that uses panels reads w.panels instead, which
// must then be set.
void quant_matmul_rows(QuantIsa isa, const QuantMatrix& w, long r0, long r1, const QuantizedActs& a,
                       float* out, long ldo);

// How the forward pass reads `model`'s weights, for model info lines: "Q4_1 x210, F32 x61, Q8_0 x1:
// quantized matmuls (native, avx512vnni)" or "...: dequantized to fp32 (f32)"; "fp32" for llama2.c
// and synthetic models.
std::string describe_weight_format(const Model& model);

}  // namespace kvscope::cpu

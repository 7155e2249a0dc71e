// Quantized-weight matmuls: every instruction set this CPU runs gives bit for bit what the
// portable scalar code gives, on random blocks of every type (odd and even block counts, zero
// blocks, int8 -128, extreme scales, row counts off the panels, row ranges inside panels); the
// scalar code is checked against exact arithmetic on the dequantized weights and quantized
// activations; and a row's result does not depend on how many activation rows are processed with
// it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/backend/cpu/quant_matmul.h"
#include "engine/common/bit_cast.h"
#include "engine/model/ggml_types.h"
#include "engine/quant/float_formats.h"

namespace kvscope::cpu {
namespace {

int block_bytes(GgmlType t) {
  return t == GgmlType::kQ4_0 ? 18 : t == GgmlType::kQ4_1 ? 20 : 34;
}

void put_half(std::byte* p, float v) {
  const std::uint16_t h = quant::f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// `rows` rows of `nb` random blocks; every 7th block all zero, scales over four decades and
// both signs (Q4_1's min too).
std::vector<std::byte> random_weights(GgmlType type, int rows, int nb, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> expo(-4.0f, 0.0f);
  std::bernoulli_distribution neg(0.3);
  const int bb = block_bytes(type);
  std::vector<std::byte> w(static_cast<std::size_t>(rows) * nb * bb);
  for (int blk = 0; blk < rows * nb; ++blk) {
    std::byte* p = w.data() + static_cast<std::size_t>(blk) * bb;
    for (int i = 0; i < bb; ++i) p[i] = static_cast<std::byte>(blk % 7 == 3 ? 0 : byte(rng));
    if (blk % 7 == 3) continue;
    put_half(p, (neg(rng) ? -1.0f : 1.0f) * std::pow(10.0f, expo(rng)));
    if (type == GgmlType::kQ4_1)
      put_half(p + 2, (neg(rng) ? -1.0f : 1.0f) * std::pow(10.0f, expo(rng)));
    if (type == GgmlType::kQ8_0 && blk % 5 == 0) p[2] = static_cast<std::byte>(0x80);  // -128
  }
  return w;
}

std::vector<float> random_acts(int m, int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> x(static_cast<std::size_t>(m) * n);
  for (float& v : x) v = dist(rng);
  for (int i = 0; i < n && i < 32; ++i) x[static_cast<std::size_t>(i)] = 0.0f;  // a zero block
  return x;
}

// Rows [r0, r1) of W times every activation row, through `isa` (with the panels it reads);
// outside those rows `out` keeps its NaNs.
std::vector<float> run(QuantIsa isa, GgmlType type, const std::vector<std::byte>& w, int rows,
                       const QuantizedActs& a, long r0 = 0, long r1 = -1) {
  std::vector<float> out(static_cast<std::size_t>(a.m) * rows, NAN);
  const std::int64_t row_bytes = ggml_row_bytes(static_cast<std::uint32_t>(type), a.n);
  std::vector<std::byte> panels;
  QuantMatrix m{type, w.data(), row_bytes};
  if (quant_isa_uses_panels(isa)) {
    panels.resize(quant_panel_bytes(type, rows, a.n));
    make_quant_panels(type, w.data(), row_bytes, rows, a.n, panels.data());
    m.panels = panels.data();
  }
  quant_matmul_rows(isa, m, r0, r1 < 0 ? rows : r1, a, out.data(), rows);
  return out;
}

const GgmlType kTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0};

TEST(QuantMatmul, EveryInstructionSetMatchesTheScalarCodeBitForBit) {
  int checked_isas = 0;
  for (QuantIsa isa : {QuantIsa::kAvx2, QuantIsa::kAvx512Vnni, QuantIsa::kWasmSimd128}) {
    if (!quant_isa_supported(isa)) continue;
    ++checked_isas;
    for (GgmlType type : kTypes) {
      // Row counts not a multiple of a panel's 16 (a padded last panel); 1, 2 and 3 activation
      // rows take AVX-512's several-panel passes (4, 2, 1 panels: 93 rows are 5 panels + 13), more
      // the passes of up to 8 rows in L1-sized chunks (several at 37 x 48 blocks). 600 rows of 48
      // blocks are more than one 256 KiB set of panels (AVX-512: 17 panels of 15 KiB), each set
      // met by every chunk.
      for (const auto& [nb, m, rows] : {std::tuple{1, 7, 13},
                                        {2, 1, 13},
                                        {2, 1, 93},
                                        {3, 2, 93},
                                        {5, 3, 13},
                                        {7, 7, 13},
                                        {18, 4, 13},
                                        {18, 37, 32},
                                        {18, 9, 17},
                                        {48, 7, 13},
                                        {48, 37, 13},
                                        {48, 37, 600}}) {
        const int n = nb * kQuantBlock;
        const auto w = random_weights(type, rows, nb, 11u * nb + static_cast<unsigned>(type));
        QuantizedActs a;
        quantize_acts(random_acts(m, n, 5u + nb).data(), m, n, a);
        const auto want = run(QuantIsa::kScalar, type, w, rows, a);
        const auto got = run(isa, type, w, rows, a);
        for (std::size_t i = 0; i < want.size(); ++i) {
          ASSERT_EQ(kvscope::bit_cast<std::uint32_t>(want[i]),
                    kvscope::bit_cast<std::uint32_t>(got[i]))
              << quant_isa_name(isa) << " "
              << ggml_type_traits(static_cast<std::uint32_t>(type))->name << " blocks " << nb
              << " element " << i << ": " << got[i] << " vs " << want[i];
        }
      }
    }
  }
  // The machines this project builds on (CI included) have AVX2, and the browser build has
  // SIMD128 (tests/web/): a silent all-scalar run would check nothing here.
  EXPECT_GE(checked_isas, 1) << "no SIMD path ran on this CPU";
}

TEST(QuantMatmul, ScalarCodeIsTheExactDotProductOfTheQuantizedValues) {
  for (GgmlType type : kTypes) {
    const int rows = 9, m = 3, nb = 5, n = nb * kQuantBlock;
    const auto w = random_weights(type, rows, nb, 77u);
    const auto x = random_acts(m, n, 78u);
    QuantizedActs a;
    quantize_acts(x.data(), m, n, a);
    const auto got = run(QuantIsa::kScalar, type, w, rows, a);
    const std::int64_t row_bytes = ggml_row_bytes(static_cast<std::uint32_t>(type), n);
    std::vector<float> wf(static_cast<std::size_t>(n));
    for (int r = 0; r < rows; ++r) {
      dequantize_row(type, w.data() + r * row_bytes, wf.data(), n);
      for (int t = 0; t < m; ++t) {
        double exact = 0.0, magnitude = 0.0, unquantized = 0.0;
        for (int e = 0; e < n; ++e) {
          const std::size_t i = static_cast<std::size_t>(t) * n + e;
          const double xv = double(a.q[i]) * a.d[i / kQuantBlock];
          exact += double(wf[static_cast<std::size_t>(e)]) * xv;
          magnitude += std::fabs(double(wf[static_cast<std::size_t>(e)]) * xv);
          unquantized += double(wf[static_cast<std::size_t>(e)]) * x[i];
        }
        const float v = got[static_cast<std::size_t>(t) * rows + r];
        // Float rounding of a few hundred terms: well inside 1e-5 of the sum of magnitudes.
        EXPECT_NEAR(v, exact, 1e-5 * magnitude + 1e-30)
            << ggml_type_traits(static_cast<std::uint32_t>(type))->name << " row " << r;
        // And 8-bit activations stay close to the fp32 activations' product.
        EXPECT_NEAR(v, unquantized, 0.02 * magnitude + 1e-30);
      }
    }
  }
}

TEST(QuantMatmul, ARowsResultDoesNotDependOnTheBatch) {
  for (QuantIsa isa :
       {QuantIsa::kScalar, QuantIsa::kAvx2, QuantIsa::kAvx512Vnni, QuantIsa::kWasmSimd128}) {
    if (!quant_isa_supported(isa)) continue;
    for (GgmlType type : kTypes) {
      const int rows = 6, nb = 18, n = nb * kQuantBlock, m = 9;
      const auto w = random_weights(type, rows, nb, 3u);
      const auto x = random_acts(m, n, 4u);
      QuantizedActs all;
      quantize_acts(x.data(), m, n, all);
      const auto batched = run(isa, type, w, rows, all);
      for (int t = 0; t < m; ++t) {
        QuantizedActs one;
        quantize_acts(x.data() + static_cast<std::size_t>(t) * n, 1, n, one);
        const auto solo = run(isa, type, w, rows, one);
        for (int r = 0; r < rows; ++r) {
          ASSERT_EQ(
              kvscope::bit_cast<std::uint32_t>(solo[static_cast<std::size_t>(r)]),
              kvscope::bit_cast<std::uint32_t>(batched[static_cast<std::size_t>(t) * rows + r]))
              << quant_isa_name(isa) << " token " << t << " row " << r;
        }
      }
    }
  }
}

// The threads split a matrix's rows (cpu_ops.cpp): a range that starts or ends inside a panel
// gives those rows the whole matrix's bits and writes no other row.
TEST(QuantMatmul, ARowRangeInsidePanelsWritesThoseRowsOnly) {
  for (QuantIsa isa :
       {QuantIsa::kScalar, QuantIsa::kAvx2, QuantIsa::kAvx512Vnni, QuantIsa::kWasmSimd128}) {
    if (!quant_isa_supported(isa)) continue;
    for (GgmlType type : kTypes) {
      const int rows = 70, nb = 6, n = nb * kQuantBlock;
      const auto w = random_weights(type, rows, nb, 9u);
      for (int m : {1, 2, 3, 11}) {
        QuantizedActs a;
        quantize_acts(random_acts(m, n, 10u + m).data(), m, n, a);
        const auto whole = run(isa, type, w, rows, a);
        for (const auto& [r0, r1] : {std::pair{5L, 9L}, {3L, 37L}, {16L, 64L}, {40L, 70L}}) {
          const auto part = run(isa, type, w, rows, a, r0, r1);
          for (int t = 0; t < m; ++t) {
            for (long r = 0; r < rows; ++r) {
              const std::size_t i = static_cast<std::size_t>(t) * rows + r;
              if (r < r0 || r >= r1) {
                ASSERT_TRUE(std::isnan(part[i])) << quant_isa_name(isa) << " wrote row " << r;
              } else {
                ASSERT_EQ(kvscope::bit_cast<std::uint32_t>(whole[i]),
                          kvscope::bit_cast<std::uint32_t>(part[i]))
                    << quant_isa_name(isa) << " rows " << r0 << ".." << r1 << " row " << r;
              }
            }
          }
        }
      }
    }
  }
}

TEST(QuantMatmul, ActivationQuantizationFollowsItsDefinition) {
  std::vector<float> x(64, 0.0f);
  x[0] = 1.0f;
  x[1] = -0.5f;
  x[5] = 0.3f;
  x[31] = -2.54f;  // the block's max magnitude: 127
  QuantizedActs a;
  quantize_acts(x.data(), 1, 64, a);
  EXPECT_FLOAT_EQ(a.d[0], 2.54f / 127.0f);
  EXPECT_EQ(a.q[31], -127);
  EXPECT_EQ(a.q[0], 50);
  EXPECT_EQ(a.q[1], -25);
  EXPECT_EQ(a.q[5], 15);
  EXPECT_EQ(a.sum[0], 50 - 25 + 15 - 127);
  EXPECT_EQ(a.sx[0], a.d[0] * -87.0f);
  EXPECT_EQ(a.sum[1], 0);
  EXPECT_EQ(a.d[1], 0.0f);  // an all-zero block
  for (int e = 32; e < 64; ++e) EXPECT_EQ(a.q[static_cast<std::size_t>(e)], 0);
}

// Every block against the definition written out (max |x|, d = max / 127, q = lrint(x / d) with
// ties to even, the sum of the q): magnitudes from 1e-30 to 1e30, exact ties, an all-zero block,
// a block of one nonzero value; on x86 also a NaN (passed over by the max; its q is 0 and counts 0
// in the sum, as lrint's 0x8000000000000000 truncated).
TEST(QuantMatmul, ActivationQuantizationOfEveryBlockIsItsDefinition) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> e10(-30, 30);
  const int blocks = 400, n = blocks * 32;
  std::vector<float> x(static_cast<std::size_t>(n));
  for (int b = 0; b < blocks; ++b) {
    const float scale = std::pow(10.0f, static_cast<float>(e10(rng)));
    for (int e = 0; e < 32; ++e) x[static_cast<std::size_t>(b * 32 + e)] = u(rng) * scale;
  }
  for (int e = 0; e < 32; ++e) {
    x[static_cast<std::size_t>(32 + e)] = 0.0f;                           // all zero
    x[static_cast<std::size_t>(64 + e)] = e == 9 ? -3.0f : 0.0f;          // one value
    x[static_cast<std::size_t>(96 + e)] = static_cast<float>(e) - 15.5f;  // ties at 127 / 15.5
  }
  x[128] = 127.0f;  // d = 1: every q = x exactly, ties to even
  for (int e = 1; e < 32; ++e) x[static_cast<std::size_t>(128 + e)] = static_cast<float>(e) + 0.5f;
#if defined(__x86_64__)
  x[170] = std::numeric_limits<float>::quiet_NaN();
#endif
  QuantizedActs a;
  quantize_acts(x.data(), 2, n / 2, a);
  ASSERT_EQ(a.q.size(), x.size());
  for (int b = 0; b < blocks; ++b) {
    const float* xb = x.data() + b * 32;
    float amax = 0.0f;
    for (int e = 0; e < 32; ++e) amax = std::fabs(xb[e]) > amax ? std::fabs(xb[e]) : amax;
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    std::int32_t sum = 0;
    for (int e = 0; e < 32; ++e) {
      const long v = std::lrint(xb[e] * id);
      ASSERT_EQ(a.q[static_cast<std::size_t>(b * 32 + e)], static_cast<std::int8_t>(v))
          << "block " << b << " element " << e << ": " << xb[e];
      sum += static_cast<std::int32_t>(v);
    }
    ASSERT_EQ(a.d[static_cast<std::size_t>(b)], d) << "block " << b;
    ASSERT_EQ(a.sum[static_cast<std::size_t>(b)], sum) << "block " << b;
    ASSERT_EQ(a.sx[static_cast<std::size_t>(b)], d * static_cast<float>(sum)) << "block " << b;
  }
  EXPECT_EQ(a.q[128 + 1], 2);  // 1.5 -> 2
  EXPECT_EQ(a.q[128 + 2], 2);  // 2.5 -> 2
}

}  // namespace
}  // namespace kvscope::cpu

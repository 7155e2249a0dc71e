// ggml tensor types: hand-built blocks of every supported type, bit-exact agreement with PyPI
// gguf's numpy dequantizers (tests/data/ggml_dequant_golden.json), type sizes, fp16/bf16, and
// errors.
#include "engine/model/ggml_types.h"
#include "engine/common/bit_cast.h"
#include "tests/test_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "engine/common/error.h"

namespace kvscope {
namespace {

using Bytes = std::vector<std::byte>;

std::uint32_t bits_of(float f) {
  return kvscope::bit_cast<std::uint32_t>(f);
}

// Same float bit for bit (so -0 != +0), except that any NaN equals any NaN.
bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || bits_of(a) == bits_of(b);
}

void put_u8(Bytes& b, std::size_t off, int v) {
  b.at(off) = static_cast<std::byte>(v & 0xFF);
}
void put_u16(Bytes& b, std::size_t off, std::uint16_t v) {
  put_u8(b, off, v & 0xFF);
  put_u8(b, off + 1, v >> 8);
}

// Dequantizes `block` (any number of whole blocks) into n floats.
std::vector<float> dequant(GgmlType type, const Bytes& block, std::int64_t n) {
  std::vector<float> out(static_cast<std::size_t>(n), -12345.0f);
  dequantize_row(type, block.data(), out.data(), n);
  return out;
}

using test::error_of;

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

// fp16 codes used below: 0.5, 0.25, -0.25, -1.
constexpr std::uint16_t kHalfHalf = 0x3800, kHalfQuarter = 0x3400, kHalfMinusQuarter = 0xB400,
                        kHalfMinusOne = 0xBC00;

TEST(GgmlFloat, Fp16SpecialValues) {
  EXPECT_EQ(bits_of(fp16_to_fp32(0x0000)), 0x00000000u);       // +0
  EXPECT_EQ(bits_of(fp16_to_fp32(0x8000)), 0x80000000u);       // -0
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));      // smallest subnormal
  EXPECT_EQ(fp16_to_fp32(0x83FF), -std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(fp16_to_fp32(0x0400), std::ldexp(1.0f, -14));      // smallest normal
  EXPECT_EQ(fp16_to_fp32(0x7BFF), 65504.0f);                   // max
  EXPECT_EQ(fp16_to_fp32(0xFBFF), -65504.0f);                  // -max
  EXPECT_EQ(fp16_to_fp32(0x3C00), 1.0f);                       // 1
  EXPECT_EQ(fp16_to_fp32(0x3555), 0.333251953125f);            // 1365/4096
  EXPECT_EQ(bits_of(fp16_to_fp32(0x7C00)), 0x7F800000u);       // +inf
  EXPECT_EQ(bits_of(fp16_to_fp32(0xFC00)), 0xFF800000u);       // -inf
  EXPECT_EQ(bits_of(fp16_to_fp32(0x7E00)), 0x7FC00000u);       // quiet NaN
  EXPECT_EQ(bits_of(fp16_to_fp32(0x7C01)), 0x7F802000u);       // payload kept
  EXPECT_EQ(bits_of(fp16_to_fp32(0xFE55)), 0xFFCAA000u);       // negative NaN
}

TEST(GgmlFloat, Bf16SpecialValues) {
  EXPECT_EQ(bits_of(bf16_to_fp32(0x0000)), 0x00000000u);               // +0
  EXPECT_EQ(bits_of(bf16_to_fp32(0x8000)), 0x80000000u);               // -0
  EXPECT_EQ(bf16_to_fp32(0x0001), std::ldexp(1.0f, -133));             // smallest subnormal
  EXPECT_EQ(bf16_to_fp32(0x807F), -std::ldexp(127.0f, -133));          // largest subnormal
  EXPECT_EQ(bf16_to_fp32(0x0080), std::numeric_limits<float>::min());  // smallest normal
  EXPECT_EQ(bf16_to_fp32(0x7F7F), std::ldexp(255.0f, 120));            // max
  EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_fp32(0x4049), 3.140625f);
  EXPECT_EQ(bits_of(bf16_to_fp32(0x7F80)), 0x7F800000u);  // +inf
  EXPECT_EQ(bits_of(bf16_to_fp32(0xFF80)), 0xFF800000u);  // -inf
  EXPECT_EQ(bits_of(bf16_to_fp32(0x7FC0)), 0x7FC00000u);  // quiet NaN
  EXPECT_EQ(bits_of(bf16_to_fp32(0x7F81)), 0x7F810000u);  // payload kept
}

TEST(GgmlDequant, PlainFloatRows) {
  Bytes f32(8);
  const float a = -2.75f, b = std::numeric_limits<float>::denorm_min();
  std::memcpy(f32.data(), &a, 4);
  std::memcpy(f32.data() + 4, &b, 4);
  const auto y32 = dequant(GgmlType::kF32, f32, 2);
  EXPECT_EQ(y32[0], -2.75f);
  EXPECT_EQ(y32[1], b);

  Bytes f16(6), bf16(6);
  put_u16(f16, 0, 0xC500);   // -5
  put_u16(f16, 2, 0x0001);   // 2^-24
  put_u16(f16, 4, 0xFC00);   // -inf
  put_u16(bf16, 0, 0xC0A0);  // -5
  put_u16(bf16, 2, 0x0001);  // 2^-133
  put_u16(bf16, 4, 0x7F80);  // +inf
  const auto y16 = dequant(GgmlType::kF16, f16, 3);
  const auto yb16 = dequant(GgmlType::kBF16, bf16, 3);
  EXPECT_EQ(y16[0], -5.0f);
  EXPECT_EQ(y16[1], std::ldexp(1.0f, -24));
  EXPECT_EQ(y16[2], -INFINITY);
  EXPECT_EQ(yb16[0], -5.0f);
  EXPECT_EQ(yb16[1], std::ldexp(1.0f, -133));
  EXPECT_EQ(yb16[2], INFINITY);
}

// Q4_0: d = 0.5, byte j = nibbles (j, (j+5) mod 16); x = (nibble - 8) * d, low nibbles first.
TEST(GgmlDequant, Q4_0HandBuilt) {
  Bytes blk(18);
  put_u16(blk, 0, kHalfHalf);
  for (int j = 0; j < 16; ++j) put_u8(blk, 2 + j, j | (((j + 5) & 15) << 4));
  const auto y = dequant(GgmlType::kQ4_0, blk, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f) << j;
    EXPECT_EQ(y[j + 16], (((j + 5) & 15) - 8) * 0.5f) << j;
  }
  EXPECT_EQ(y[0], -4.0f);
  EXPECT_EQ(y[15], 3.5f);
  EXPECT_EQ(y[16], -1.5f);  // byte 0 high nibble 5
  EXPECT_EQ(y[26], 3.5f);   // byte 10 high nibble 15
  EXPECT_EQ(y[27], -4.0f);  // byte 11 high nibble 0
}

// Q4_1: d = 0.5, m = -1, byte j = nibbles (j, 3j mod 16); x = nibble * d + m.
TEST(GgmlDequant, Q4_1HandBuilt) {
  Bytes blk(20);
  put_u16(blk, 0, kHalfHalf);
  put_u16(blk, 2, kHalfMinusOne);
  for (int j = 0; j < 16; ++j) put_u8(blk, 4 + j, j | (((3 * j) & 15) << 4));
  const auto y = dequant(GgmlType::kQ4_1, blk, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], j * 0.5f - 1.0f) << j;
    EXPECT_EQ(y[j + 16], ((3 * j) & 15) * 0.5f - 1.0f) << j;
  }
  EXPECT_EQ(y[0], -1.0f);
  EXPECT_EQ(bits_of(y[2]), bits_of(0.0f));  // 1 + (-1) is +0
  EXPECT_EQ(y[15], 6.5f);
  EXPECT_EQ(y[17], 0.5f);  // byte 1 high nibble 3
  EXPECT_EQ(y[21], 6.5f);  // byte 5 high nibble 15
}

// Q8_0: d = -0.25, signed bytes; x = q * d (0 * -0.25 is -0).
TEST(GgmlDequant, Q8_0HandBuilt) {
  Bytes blk(34);
  put_u16(blk, 0, kHalfMinusQuarter);
  const int qs[32] = {-128, 127, 0, -1, 1, 64, -64, 5};  // rest 0
  for (int j = 0; j < 32; ++j) put_u8(blk, 2 + j, qs[j]);
  const auto y = dequant(GgmlType::kQ8_0, blk, 32);
  EXPECT_EQ(y[0], 32.0f);
  EXPECT_EQ(y[1], -31.75f);
  EXPECT_EQ(bits_of(y[2]), bits_of(-0.0f));
  EXPECT_EQ(y[3], 0.25f);
  EXPECT_EQ(y[4], -0.25f);
  EXPECT_EQ(y[5], -16.0f);
  EXPECT_EQ(y[6], 16.0f);
  EXPECT_EQ(y[7], -1.25f);
  for (int j = 8; j < 32; ++j) EXPECT_EQ(bits_of(y[j]), bits_of(-0.0f)) << j;
}

// Byte i of a quant payload in the K-quant tests: all nibbles and 2-bit fields vary.
int payload_byte(int i) {
  return (i * 37 + 11) & 0xFF;
}

// Q4_K with d = 0.5, dmin = 0.25 and chosen 6-bit scales/mins, packed by hand:
//   sub-block s:  0  1   2   3   4   5   6   7
//   scale:        1  2  33  63  17  40   5  63
//   min:          0  3  47  20  62   9  16   1
// Sub-blocks 0-3: low 6 bits of bytes 0-3 (scales) and 4-7 (mins). Sub-blocks 4-7: low nibbles in
// bytes 8-11 (scale in the low half, min in the high half), top 2 bits in the top 2 bits of bytes
// 0-3 (scale) and 4-7 (min). E.g. byte 0 = 1 | (17 >> 4) << 6 = 0x41, byte 8 = (17 & 15) | (62 &
// 15) << 4 = 0xE1, byte 4 = 0 | (62 >> 4) << 6 = 0xC0.
TEST(GgmlDequant, Q4_KHandBuiltBothScalePackings) {
  const int scale[8] = {1, 2, 33, 63, 17, 40, 5, 63};
  const int min[8] = {0, 3, 47, 20, 62, 9, 16, 1};
  const int packed[12] = {0x41, 0x82, 0x21, 0xFF, 0xC0, 0x03, 0x6F, 0x14, 0xE1, 0x98, 0x05, 0x1F};
  Bytes blk(144);
  put_u16(blk, 0, kHalfHalf);
  put_u16(blk, 2, kHalfQuarter);
  for (int i = 0; i < 12; ++i) put_u8(blk, 4 + i, packed[i]);
  for (int i = 0; i < 128; ++i) put_u8(blk, 16 + i, payload_byte(i));
  const auto y = dequant(GgmlType::kQ4_K, blk, 256);

  // Element e is in sub-block s = e/32 and reads qs[32*(e/64) + e%32]: its low nibble when s is
  // even, its high nibble when s is odd.
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32, byte = payload_byte(32 * (e / 64) + e % 32);
    const int q = s % 2 == 0 ? (byte & 15) : (byte >> 4);
    EXPECT_EQ(y[e], 0.5f * scale[s] * q - 0.25f * min[s]) << "element " << e;
  }
  EXPECT_EQ(y[0], 5.5f);       // qs[0] = 0x0B, low 11: 0.5*1*11 - 0
  EXPECT_EQ(y[33], 2.25f);     // qs[1] = 0x30, high 3: 0.5*2*3 - 0.25*3
  EXPECT_EQ(y[150], 61.0f);    // qs[86] = 0x79, low 9: 0.5*17*9 - 0.25*62
  EXPECT_EQ(y[170], 217.75f);  // qs[74] = 0xBD, high 11: 0.5*40*11 - 0.25*9
  EXPECT_EQ(y[200], 3.5f);     // qs[104] = 0x13, low 3: 0.5*5*3 - 0.25*16
  EXPECT_EQ(y[255], 188.75f);  // qs[127] = 0x66, high 6: 0.5*63*6 - 0.25*1
}

// Q6_K with d = 0.5 and signed 8-bit scales (one per 16 elements, negatives included). Element e is
// in half h = e/128; with r = e%128, quarter g = r/32 and l = r%32 its low 4 bits are ql[64h + l +
// 32*(g odd)] (low nibble for g < 2, high for g >= 2) and its top 2 bits are bits 2g..2g+1 of
// qh[32h + l]; x = d * scale[e/16] * (q - 32).
TEST(GgmlDequant, Q6_KHandBuilt) {
  const int scale[16] = {1, -1, 2, -2, 3, -3, 4, -4, 5, -5, 6, -6, 7, -7, -128, 127};
  Bytes blk(210);
  for (int i = 0; i < 128; ++i) put_u8(blk, i, payload_byte(i));
  const auto qh_byte = [](int i) { return (i * 73 + 5) & 0xFF; };
  for (int i = 0; i < 64; ++i) put_u8(blk, 128 + i, qh_byte(i));
  for (int i = 0; i < 16; ++i) put_u8(blk, 192 + i, scale[i]);
  put_u16(blk, 208, kHalfHalf);
  const auto y = dequant(GgmlType::kQ6_K, blk, 256);

  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    const int lo_byte = payload_byte(64 * h + l + 32 * (g % 2));
    const int lo = g < 2 ? (lo_byte & 15) : (lo_byte >> 4);
    const int hi = (qh_byte(32 * h + l) >> (2 * g)) & 3;
    EXPECT_TRUE(same_float(y[e], 0.5f * scale[e / 16] * ((lo | hi << 4) - 32))) << "element " << e;
  }
  EXPECT_EQ(y[0], -2.5f);       // ql[0] low 11, qh[0] bits 0-1 = 1: q = 27, 0.5*1*(27-32)
  EXPECT_EQ(y[18], -10.5f);     // ql[18] low 5, qh[18] bits 0-1 = 3: q = 53, 0.5*-1*21
  EXPECT_EQ(y[40], 19.0f);      // ql[40] low 3, qh[8] bits 2-3 = 3: q = 51, 0.5*2*19
  EXPECT_EQ(y[200], 24.5f);     // ql[72] high 7, qh[40] bits 4-5 = 2: q = 39, 0.5*7*7
  EXPECT_EQ(y[230], -1792.0f);  // ql[102] high 12, qh[38] bits 6-7 = 3: q = 60, 0.5*-128*28
  EXPECT_EQ(y[255], 1397.0f);   // ql[127] high 6, qh[63] bits 6-7 = 3: q = 54, 0.5*127*22
  EXPECT_EQ(bits_of(y[17]), bits_of(-0.0f));  // q = 32 under a negative scale
}

// --- Agreement with gguf.quants (scripts/gen_ggml_dequant_golden.py) ---

const nlohmann::json& golden() {
  static const nlohmann::json doc = [] {
    const std::string path =
        std::string(KVSCOPE_SOURCE_DIR) + "/tests/data/ggml_dequant_golden.json";
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open " + path);
    return nlohmann::json::parse(in);
  }();
  return doc;
}

Bytes from_hex(const std::string& hex) {
  Bytes out(hex.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<std::byte>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  return out;
}

TEST(GgmlGolden, DequantizationMatchesGgufBitForBit) {
  const auto& cases = golden().at("cases");
  ASSERT_GE(cases.size(), 10u);
  std::set<std::string> types_seen;
  for (const auto& c : cases) {
    const std::string name = c.at("name");
    const auto type_id = c.at("type_id").get<std::uint32_t>();
    const auto n = c.at("n").get<std::int64_t>();
    const Bytes raw = from_hex(c.at("bytes_hex"));
    const Bytes want_bytes = from_hex(c.at("expected_f32_le_hex"));
    ASSERT_EQ(static_cast<std::int64_t>(raw.size()), ggml_row_bytes(type_id, n)) << name;
    ASSERT_EQ(want_bytes.size(), static_cast<std::size_t>(n) * 4) << name;
    std::vector<float> want(static_cast<std::size_t>(n));
    std::memcpy(want.data(), want_bytes.data(), want_bytes.size());
    types_seen.insert(c.at("type").get<std::string>());

    // At offset 1 as well: tensor data in a GGUF file need not be aligned for float or fp16.
    for (std::size_t offset : {0u, 1u}) {
      Bytes buf(offset + raw.size());
      std::memcpy(buf.data() + offset, raw.data(), raw.size());
      std::vector<float> got(static_cast<std::size_t>(n));
      dequantize_row(static_cast<GgmlType>(type_id), buf.data() + offset, got.data(), n);
      int mismatches = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        if (same_float(got[i], want[i])) continue;
        if (++mismatches <= 3) {
          ADD_FAILURE() << name << " offset " << offset << " element " << i << ": got bits "
                        << std::hex << bits_of(got[i]) << ", gguf " << bits_of(want[i]);
        }
      }
      EXPECT_EQ(mismatches, 0) << name;
    }
  }
  EXPECT_EQ(types_seen,
            (std::set<std::string>{"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q6_K"}));
}

TEST(GgmlTypes, TraitsMatchGgufQuantSizes) {
  const auto& sizes = golden().at("quant_sizes");
  ASSERT_GE(sizes.size(), 30u);
  for (const auto& s : sizes) {
    const auto id = s.at("type_id").get<std::uint32_t>();
    const std::string name = s.at("type");
    const auto traits = ggml_type_traits(id);
    ASSERT_TRUE(traits.has_value()) << name;
    EXPECT_EQ(std::string(traits->name), name);
    EXPECT_EQ(traits->block_elems, s.at("block_elems").get<int>()) << name;
    // gguf-py still lists Q8_1 with two f32 fields (40 bytes); ggml's block_q8_1 holds two fp16
    // (d, s) and 32 int8, 36 bytes. Q8_1 is an internal activation format, never stored in GGUF.
    const int want_bytes = name == "Q8_1" ? 36 : s.at("block_bytes").get<int>();
    EXPECT_EQ(traits->block_bytes, want_bytes) << name;
  }
}

TEST(GgmlTypes, UndefinedAndSupportedIds) {
  for (std::uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 43u, 64u, 1000u, 0xFFFFFFFFu}) {
    EXPECT_FALSE(ggml_type_traits(id).has_value()) << id;
  }
  const auto q2_0 = ggml_type_traits(42);  // newer than the gguf package
  ASSERT_TRUE(q2_0.has_value());
  EXPECT_EQ(std::string(q2_0->name), "Q2_0");
  EXPECT_EQ(q2_0->block_elems, 64);
  EXPECT_EQ(q2_0->block_bytes, 18);

  std::set<std::uint32_t> supported;
  for (std::uint32_t id = 0; id < 64; ++id) {
    const auto t = ggml_type_traits(id);
    if (t && t->supported) supported.insert(id);
  }
  EXPECT_EQ(supported, (std::set<std::uint32_t>{0, 1, 2, 3, 8, 12, 14, 30}));
  EXPECT_EQ(std::string(ggml_type_traits(13)->name), "Q5_K");
  EXPECT_FALSE(ggml_type_traits(13)->supported);
}

TEST(GgmlTypes, RowBytes) {
  EXPECT_EQ(ggml_row_bytes(0, 3), 12);
  EXPECT_EQ(ggml_row_bytes(30, 5), 10);
  EXPECT_EQ(ggml_row_bytes(2, 64), 36);
  EXPECT_EQ(ggml_row_bytes(12, 512), 288);
  EXPECT_EQ(ggml_row_bytes(14, 256), 210);
  EXPECT_EQ(ggml_row_bytes(13, 256), 176);  // known but not decodable: size still computable
  EXPECT_EQ(ggml_row_bytes(12, 0), 0);

  const std::string ragged = error_of([] { ggml_row_bytes(12, 100); });
  expect_contains(ragged, "Q4_K");
  expect_contains(ragged, "multiple of");
  expect_contains(ragged, "256");
  expect_contains(ragged, "got 100");
  expect_contains(error_of([] { ggml_row_bytes(99, 32); }), "ggml type 99");
  expect_contains(error_of([] { ggml_row_bytes(2, -32); }), "got -32");
  expect_contains(error_of([] { ggml_row_bytes(0, std::numeric_limits<std::int64_t>::max()); }),
                  "fits in int64");
}

TEST(GgmlTypes, DequantizeErrorsNameTypeAndExpectation) {
  Bytes buf(1024);
  std::vector<float> out(256);
  const std::string q5k =
      error_of([&] { dequantize_row(static_cast<GgmlType>(13), buf.data(), out.data(), 256); });
  expect_contains(q5k, "Q5_K (ggml type 13)");
  expect_contains(q5k, "expected a type kvscope can dequantize");
  expect_contains(q5k, "Q6_K");
  expect_contains(
      error_of([&] { dequantize_row(static_cast<GgmlType>(99), buf.data(), out.data(), 32); }),
      "ggml type 99 (not a type ggml defines)");

  const std::string ragged =
      error_of([&] { dequantize_row(GgmlType::kQ4_K, buf.data(), out.data(), 100); });
  expect_contains(ragged, "Q4_K's block size 256");
  expect_contains(ragged, "got 100");
  expect_contains(error_of([&] { dequantize_row(GgmlType::kQ8_0, buf.data(), out.data(), 48); }),
                  "Q8_0's block size 32");
  expect_contains(error_of([&] { dequantize_row(GgmlType::kF32, buf.data(), out.data(), -1); }),
                  "got -1");

  out.assign(4, 7.0f);
  dequantize_row(GgmlType::kQ4_0, buf.data(), out.data(), 0);  // an empty row is fine
  EXPECT_EQ(out[0], 7.0f);
}

}  // namespace
}  // namespace kvscope

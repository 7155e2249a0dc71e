// GGUF reader and Llama loader: hand-built files (every metadata type, alignment, tensor layout),
// one test per malformation the reader must reject, Llama configs and weights, and the real
// SmolLM2.
#include "engine/model/gguf.h"
#include "engine/common/bit_cast.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/common/error.h"
#include "engine/model/ggml_types.h"
#include "engine/model/gguf_model.h"
#include "engine/model/locate.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

static_assert(std::endian::native == std::endian::little, "the builder writes host-order bytes");

constexpr std::uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ5_0 = 6, kQ8_0 = 8;

// Appends GGUF's little-endian pieces to a byte buffer; at() is where the next byte goes.
struct GgufBytes {
  std::vector<std::byte> b;

  std::size_t at() const { return b.size(); }
  std::span<const std::byte> span() const { return b; }
  GgufBytes& raw(const void* p, std::size_t n) {
    const auto* c = static_cast<const std::byte*>(p);
    b.insert(b.end(), c, c + n);
    return *this;
  }
  GgufBytes& append(const GgufBytes& other) { return raw(other.b.data(), other.b.size()); }
  template <typename T>
  GgufBytes& put(T v) {
    return raw(&v, sizeof v);
  }
  GgufBytes& u8(std::uint8_t v) { return put(v); }
  GgufBytes& u32(std::uint32_t v) { return put(v); }
  GgufBytes& u64(std::uint64_t v) { return put(v); }
  GgufBytes& type(GgufType t) { return u32(static_cast<std::uint32_t>(t)); }
  GgufBytes& str(std::string_view s) { return u64(s.size()).raw(s.data(), s.size()); }
  GgufBytes& zeros(std::size_t n) {
    b.resize(b.size() + n);
    return *this;
  }
  GgufBytes& pad(std::size_t alignment) {
    return zeros((alignment - at() % alignment) % alignment);
  }
  GgufBytes& truncate(std::size_t n) {
    b.resize(n);
    return *this;
  }

  // "GGUF", version, tensor count, metadata count (24 bytes).
  GgufBytes& header(std::uint64_t n_tensors, std::uint64_t n_kv, std::uint32_t version = 3) {
    return raw("GGUF", 4).u32(version).u64(n_tensors).u64(n_kv);
  }
  // A key and its value type; the value follows.
  GgufBytes& key(std::string_view k, GgufType t) { return str(k).type(t); }
  GgufBytes& kv_u32(std::string_view k, std::uint32_t v) {
    return key(k, GgufType::kUint32).u32(v);
  }
  GgufBytes& kv_string(std::string_view k, std::string_view v) {
    return key(k, GgufType::kString).str(v);
  }
  GgufBytes& array_header(GgufType elem, std::uint64_t count) { return type(elem).u64(count); }
  GgufBytes& tensor_info(std::string_view name, const std::vector<std::uint64_t>& dims,
                         std::uint32_t ggml_type, std::uint64_t offset) {
    str(name).u32(static_cast<std::uint32_t>(dims.size()));
    for (std::uint64_t d : dims) u64(d);
    return u32(ggml_type).u64(offset);
  }
};

// A typed value's bytes (type id + payload), to put after a key.
template <typename T>
GgufBytes typed(GgufType t, T v) {
  GgufBytes g;
  g.type(t).put(v);
  return g;
}
GgufBytes typed_string(std::string_view s) {
  GgufBytes g;
  g.type(GgufType::kString).str(s);
  return g;
}
GgufBytes typed_strings(const std::vector<std::string>& items) {
  GgufBytes g;
  g.type(GgufType::kArray).array_header(GgufType::kString, items.size());
  for (const auto& s : items) g.str(s);
  return g;
}

// A whole GGUF file from metadata and tensors, laid out as llama.cpp writes it: data offsets
// packed at the alignment. build() records where each part went.
struct TinyGguf {
  struct Tensor {
    std::string name;
    std::vector<std::uint64_t> dims;
    std::uint32_t type = kF32;
    std::vector<std::byte> data;
    std::optional<std::uint64_t> offset;  // relative; default: packed after the previous one
  };
  std::vector<std::pair<std::string, GgufBytes>> kvs;
  std::vector<Tensor> tensors;
  std::uint32_t alignment = 32;  // the layout's (set general.alignment to match)
  std::uint32_t version = 3;

  // Where build() put things.
  std::vector<std::size_t> kv_at;           // each key's length field
  std::vector<std::size_t> tensor_info_at;  // each tensor info's name length field
  std::size_t infos_end = 0;
  std::size_t data_offset = 0;
  std::vector<std::uint64_t> relative_offsets;

  void set(const std::string& key, GgufBytes value) {
    for (auto& [k, v] : kvs) {
      if (k == key) {
        v = std::move(value);
        return;
      }
    }
    kvs.emplace_back(key, std::move(value));
  }
  void set_u32(const std::string& key, std::uint32_t v) { set(key, typed(GgufType::kUint32, v)); }
  void set_f32(const std::string& key, float v) { set(key, typed(GgufType::kFloat32, v)); }
  void set_string(const std::string& key, std::string_view v) { set(key, typed_string(v)); }
  void set_alignment(std::uint32_t a) {
    alignment = a;
    set_u32("general.alignment", a);
  }
  void erase(const std::string& key) {
    std::erase_if(kvs, [&](const auto& kv) { return kv.first == key; });
  }
  Tensor& add_tensor(std::string name, std::vector<std::uint64_t> dims, std::uint32_t type,
                     std::vector<std::byte> data) {
    std::erase_if(tensors, [&](const Tensor& t) { return t.name == name; });
    tensors.push_back({std::move(name), std::move(dims), type, std::move(data), std::nullopt});
    return tensors.back();
  }
  void remove_tensor(const std::string& name) {
    std::erase_if(tensors, [&](const Tensor& t) { return t.name == name; });
  }

  GgufBytes build() {
    GgufBytes g;
    g.header(tensors.size(), kvs.size(), version);
    kv_at.clear();
    for (const auto& [k, v] : kvs) {
      kv_at.push_back(g.at());
      g.str(k).append(v);
    }
    tensor_info_at.clear();
    relative_offsets.clear();
    std::uint64_t next = 0;
    for (const Tensor& t : tensors) {
      tensor_info_at.push_back(g.at());
      const std::uint64_t off = t.offset.value_or(next);
      relative_offsets.push_back(off);
      g.tensor_info(t.name, t.dims, t.type, off);
      next = (off + t.data.size() + alignment - 1) / alignment * alignment;
    }
    infos_end = g.at();
    g.pad(alignment);
    data_offset = g.at();
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].offset) continue;  // hand-placed tensors bring no data
      g.zeros(data_offset + relative_offsets[i] - g.at());
      g.raw(tensors[i].data.data(), tensors[i].data.size());
    }
    if (!tensors.empty()) g.pad(alignment);
    return g;
  }
};

std::vector<std::byte> f32_bytes(const std::vector<float>& v) {
  std::vector<std::byte> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// The binary16 bits of `f`, which must be zero or a normal fp16 number held exactly.
std::uint16_t fp16_bits(float f) {
  const auto bits = kvscope::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000);
  if ((bits & 0x7fffffff) == 0) return sign;
  const int exp = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
  if (exp < 1 || exp > 30 || (bits & 0x1fff) != 0) {
    ADD_FAILURE() << f << " is not an exact normal fp16 value";
  }
  return static_cast<std::uint16_t>(sign | (exp << 10) | ((bits >> 13) & 0x3ff));
}

using test::error_of;

std::string parse_error(const GgufBytes& g) {
  return error_of([&] { GgufFile f(g.span(), "t.gguf"); });
}

// ---------------------------------------------------------------------------------------------
// Metadata values

// One key of every value type, arrays of ints, strings and arrays, and an empty array.
TinyGguf every_type_file() {
  TinyGguf g;
  g.set("u8", typed(GgufType::kUint8, std::uint8_t{200}));
  g.set("i8", typed(GgufType::kInt8, std::int8_t{-100}));
  g.set("u16", typed(GgufType::kUint16, std::uint16_t{60000}));
  g.set("i16", typed(GgufType::kInt16, std::int16_t{-30000}));
  g.set("u32", typed(GgufType::kUint32, std::uint32_t{4000000000u}));
  g.set("i32", typed(GgufType::kInt32, std::int32_t{-2000000000}));
  g.set("i32_positive", typed(GgufType::kInt32, std::int32_t{7}));
  g.set("f32", typed(GgufType::kFloat32, 0.5f));
  g.set("yes", typed(GgufType::kBool, std::uint8_t{1}));
  g.set("no", typed(GgufType::kBool, std::uint8_t{0}));
  g.set_string("str", "hello");
  g.set_string("ctrl", "a\nb");
  g.set_string("long", std::string(70, 'x'));
  g.set("u64", typed(GgufType::kUint64, std::uint64_t{(1ull << 63) + 5}));
  g.set("i64", typed(GgufType::kInt64, std::int64_t{-(1ll << 62)}));
  g.set("f64", typed(GgufType::kFloat64, 0.1));
  GgufBytes ints;
  ints.type(GgufType::kArray).array_header(GgufType::kInt32, 3);
  for (std::int32_t v : {1, -2, 3}) ints.put(v);
  g.set("ints", ints);
  GgufBytes u16s;
  u16s.type(GgufType::kArray).array_header(GgufType::kUint16, 2);
  u16s.put(std::uint16_t{65535}).put(std::uint16_t{0});
  g.set("u16s", u16s);
  g.set("strs", typed_strings({"alpha", "beta", "gamma"}));
  GgufBytes nested;  // [[1, 2], [3]] of uint8
  nested.type(GgufType::kArray).array_header(GgufType::kArray, 2);
  nested.array_header(GgufType::kUint8, 2).u8(1).u8(2);
  nested.array_header(GgufType::kUint8, 1).u8(3);
  g.set("nested", nested);
  GgufBytes empty;
  empty.type(GgufType::kArray).array_header(GgufType::kFloat32, 0);
  g.set("empty", empty);
  return g;
}

TEST(GgufMetadata, EveryValueTypeParses) {
  TinyGguf spec = every_type_file();
  const GgufBytes bytes = spec.build();
  const GgufFile f(bytes.span(), "t.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.metadata().size(), 21u);
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(f.size(), bytes.at());

  struct Case {
    const char* key;
    GgufType type;
    const char* text;
  };
  const Case cases[] = {
      {"u8", GgufType::kUint8, "200"},
      {"i8", GgufType::kInt8, "-100"},
      {"u16", GgufType::kUint16, "60000"},
      {"i16", GgufType::kInt16, "-30000"},
      {"u32", GgufType::kUint32, "4000000000"},
      {"i32", GgufType::kInt32, "-2000000000"},
      {"f32", GgufType::kFloat32, "0.5"},
      {"yes", GgufType::kBool, "true"},
      {"no", GgufType::kBool, "false"},
      {"str", GgufType::kString, "\"hello\""},
      {"ctrl", GgufType::kString, "\"a\\x0ab\""},
      {"u64", GgufType::kUint64, "9223372036854775813"},
      {"i64", GgufType::kInt64, "-4611686018427387904"},
      {"f64", GgufType::kFloat64, "0.1"},
      {"ints", GgufType::kArray, "[3 int32]"},
      {"strs", GgufType::kArray, "[3 string]"},
      {"nested", GgufType::kArray, "[2 array]"},
      {"empty", GgufType::kArray, "[0 float32]"},
  };
  for (const Case& c : cases) {
    const GgufValue* v = f.find(c.key);
    ASSERT_NE(v, nullptr) << c.key;
    EXPECT_EQ(v->type, c.type) << c.key;
    EXPECT_EQ(v->describe(), c.text) << c.key;
  }
  EXPECT_EQ(f.find("long")->describe(), "\"" + std::string(60, 'x') + "...\"");
  EXPECT_EQ(f.find("missing"), nullptr);

  EXPECT_EQ(f.get_uint("u8"), 200u);
  EXPECT_EQ(f.get_uint("u16"), 60000u);
  EXPECT_EQ(f.get_uint("u32"), 4000000000u);
  EXPECT_EQ(f.get_uint("u64"), (1ull << 63) + 5);
  EXPECT_EQ(f.get_uint("i32_positive"), 7u);
  EXPECT_EQ(f.get_uint("missing"), std::nullopt);
  EXPECT_EQ(f.get_float("f32"), 0.5);
  EXPECT_EQ(f.get_float("f64"), 0.1);
  EXPECT_EQ(f.get_string("str"), "hello");
  EXPECT_EQ(f.get_string("ctrl"), "a\nb");
  EXPECT_EQ(f.get_bool("yes"), true);
  EXPECT_EQ(f.get_bool("no"), false);
  EXPECT_EQ(f.get_bool("missing"), std::nullopt);
  EXPECT_EQ(f.require_uint("u16"), 60000u);
  EXPECT_EQ(f.require_string("str"), "hello");
  EXPECT_EQ(f.get_string_array("strs"), (std::vector<std::string>{"alpha", "beta", "gamma"}));
  EXPECT_EQ(f.get_int_array("ints"), (std::vector<std::int64_t>{1, -2, 3}));
  EXPECT_EQ(f.get_int_array("u16s"), (std::vector<std::int64_t>{65535, 0}));
  EXPECT_TRUE(f.get_int_array("missing").empty());
  EXPECT_TRUE(f.get_string_array("missing").empty());

  const GgufValue& nested = *f.find("nested");
  EXPECT_EQ(nested.elem_type, GgufType::kArray);
  ASSERT_EQ(nested.items().size(), 2u);
  EXPECT_EQ(nested.items()[0].elem_type, GgufType::kUint8);
  ASSERT_EQ(nested.items()[0].items().size(), 2u);
  EXPECT_EQ(std::get<std::uint64_t>(nested.items()[0].items()[1].data), 2u);
  EXPECT_EQ(std::get<std::uint64_t>(nested.items()[1].items()[0].data), 3u);
  EXPECT_EQ(std::get<std::int64_t>(f.find("ints")->items()[1].data), -2);
  EXPECT_EQ(std::get<double>(f.find("f32")->data), 0.5);
  EXPECT_TRUE(f.find("ints")->is_array());
  EXPECT_TRUE(f.find("i8")->is_integer());
  EXPECT_FALSE(f.find("f32")->is_integer());
}

TEST(GgufMetadata, TypedGettersNameTheKeyAndTheTypeFound) {
  TinyGguf spec = every_type_file();
  const GgufBytes bytes = spec.build();
  const GgufFile f(bytes.span(), "t.gguf");
  EXPECT_THAT(
      error_of([&] { (void)f.get_uint("i8"); }),
      AllOf(HasSubstr("t.gguf: i8: expected a non-negative integer"), HasSubstr("got int8 -100")));
  EXPECT_THAT(error_of([&] { (void)f.get_uint("str"); }),
              HasSubstr("str: expected a non-negative integer, got string \"hello\""));
  EXPECT_THAT(error_of([&] { (void)f.get_float("u32"); }),
              HasSubstr("u32: expected a float, got uint32 4000000000"));
  EXPECT_THAT(error_of([&] { (void)f.get_string("yes"); }),
              HasSubstr("yes: expected a string, got bool true"));
  EXPECT_THAT(error_of([&] { (void)f.get_bool("u8"); }),
              HasSubstr("u8: expected a bool, got uint8 200"));
  EXPECT_THAT(error_of([&] { (void)f.get_string_array("ints"); }),
              HasSubstr("ints: expected an array of strings, got array [3 int32]"));
  EXPECT_THAT(error_of([&] { (void)f.get_int_array("strs"); }),
              HasSubstr("strs: expected an array of integers, got array [3 string]"));
  EXPECT_THAT(error_of([&] { (void)f.get_int_array("nested"); }),
              HasSubstr("nested: expected an array of integers"));
  EXPECT_THAT(error_of([&] { (void)f.get_int_array("u8"); }),
              HasSubstr("u8: expected an array of integers, got uint8 200"));
  EXPECT_THAT(error_of([&] { (void)f.require_uint("missing"); }),
              HasSubstr("t.gguf: missing: expected an integer metadata key, got none (missing)"));
  EXPECT_THAT(error_of([&] { (void)f.require_string("missing"); }),
              HasSubstr("missing: expected a string metadata key, got none (missing)"));
}

TEST(GgufMetadata, Version2ParsesAndTypeNamesAreGgufs) {
  TinyGguf spec;
  spec.version = 2;
  spec.set_string("general.name", "v2");
  const GgufBytes bytes = spec.build();
  const GgufFile f(bytes.span(), "t.gguf");
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.get_string("general.name"), "v2");
  EXPECT_STREQ(gguf_type_name(GgufType::kFloat64), "float64");
  EXPECT_STREQ(gguf_type_name(GgufType::kArray), "array");
  EXPECT_STREQ(gguf_type_name(static_cast<GgufType>(99)), "unknown");
}

TEST(GgufMetadata, NestedArraysUpToEightDeepParse) {
  // depth levels of arrays around a [7] of uint8; 8 parse, 9 are refused.
  auto nested = [](int depth) {
    GgufBytes g;
    g.header(0, 1).key("deep", GgufType::kArray);
    for (int i = 1; i < depth; ++i) g.array_header(GgufType::kArray, 1);
    g.array_header(GgufType::kUint8, 1).u8(7);
    return g;
  };
  const GgufBytes ok = nested(8);
  const GgufFile f(ok.span(), "t.gguf");
  const GgufValue* v = f.find("deep");
  ASSERT_NE(v, nullptr);
  for (int i = 1; i < 8; ++i) v = &v->items().at(0);
  EXPECT_EQ(std::get<std::uint64_t>(v->items().at(0).data), 7u);

  EXPECT_THAT(parse_error(nested(9)),
              AllOf(HasSubstr("deep[0][0][0][0][0][0][0][0]"),
                    HasSubstr("expected arrays nested at most 8 deep, got a deeper array")));
}

// ---------------------------------------------------------------------------------------------
// Layout: alignment, data section, tensor offsets

TinyGguf two_tensor_file() {
  TinyGguf g;
  g.set_string("general.name", "two");
  std::vector<float> a(10), b(6);
  for (int i = 0; i < 10; ++i) a[i] = 0.25f * static_cast<float>(i);
  for (int i = 0; i < 6; ++i) b[i] = -1.0f - static_cast<float>(i);
  g.add_tensor("a", {5, 2}, kF32, f32_bytes(a));
  g.add_tensor("b", {6}, kF32, f32_bytes(b));
  return g;
}

TEST(GgufLayout, DefaultAlignmentIs32) {
  TinyGguf spec = two_tensor_file();
  const GgufBytes bytes = spec.build();
  const GgufFile f(bytes.span(), "t.gguf");
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset(), (spec.infos_end + 31) / 32 * 32);
  EXPECT_EQ(f.data_offset(), spec.data_offset);
  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensorInfo& a = f.tensors()[0];
  const GgufTensorInfo& b = f.tensors()[1];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.dims, (std::vector<std::int64_t>{5, 2}));
  EXPECT_EQ(a.num_elements(), 10);
  EXPECT_EQ(a.type, kF32);
  EXPECT_EQ(a.offset, f.data_offset());  // absolute
  EXPECT_EQ(a.num_bytes, 40u);
  EXPECT_EQ(b.offset, f.data_offset() + 64);  // 40 rounded up to 32
  EXPECT_EQ(b.num_bytes, 24u);
  EXPECT_EQ(f.find_tensor("b"), &b);
  EXPECT_EQ(f.find_tensor("c"), nullptr);

  const auto a_bytes = f.tensor_bytes(a);
  ASSERT_EQ(a_bytes.size(), 40u);
  EXPECT_EQ(a_bytes.data(), bytes.b.data() + f.data_offset());
  float a3 = 0;
  std::memcpy(&a3, a_bytes.data() + 12, 4);
  EXPECT_EQ(a3, 0.75f);
  EXPECT_EQ(0, std::memcmp(f.tensor_bytes(b).data(), spec.tensors[1].data.data(), 24));
}

TEST(GgufLayout, GeneralAlignmentIsHonoured) {
  TinyGguf spec = two_tensor_file();
  spec.set_alignment(64);
  const GgufBytes bytes = spec.build();
  const GgufFile f(bytes.span(), "t.gguf");
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.data_offset(), (spec.infos_end + 63) / 64 * 64);
  EXPECT_EQ(f.tensors()[0].offset, f.data_offset());
  EXPECT_EQ(f.tensors()[1].offset, f.data_offset() + 64);
  EXPECT_EQ(0, std::memcmp(f.tensor_bytes(f.tensors()[1]).data(), spec.tensors[1].data.data(), 24));

  // An offset that is a multiple of 32 but not of 64 is now misaligned.
  spec.tensors[1].offset = 96;
  GgufBytes bad = spec.build();
  bad.zeros(256);
  EXPECT_THAT(
      parse_error(bad),
      AllOf(HasSubstr("byte " + std::to_string(spec.infos_end - 8) + ": tensor \"b\" offset"),
            HasSubstr("expected a multiple of the alignment 64, got 96")));
}

TEST(GgufLayout, ReadsFromAPathToo) {
  TinyGguf spec = two_tensor_file();
  const GgufBytes bytes = spec.build();
  const std::string path = test::temp_path("two.gguf");
  test::write_bytes(path,
                    std::vector<char>(reinterpret_cast<const char*>(bytes.b.data()),
                                      reinterpret_cast<const char*>(bytes.b.data()) + bytes.at()));
  const GgufFile f(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.size(), bytes.at());
  EXPECT_EQ(f.get_string("general.name"), "two");
  EXPECT_EQ(
      0, std::memcmp(f.tensor_bytes(*f.find_tensor("a")).data(), spec.tensors[0].data.data(), 40));
  EXPECT_TRUE(is_gguf_file(path));
  const std::string other = test::temp_path("not.gguf");
  test::write_bytes(other, {'G', 'G', 'U'});
  EXPECT_FALSE(is_gguf_file(other));
  EXPECT_FALSE(is_gguf_file(test::temp_path("absent.gguf")));
}

// ---------------------------------------------------------------------------------------------
// Malformed files: every message names the file, the byte offset or field, and the expectation.

TEST(GgufErrors, BadMagic) {
  GgufBytes g;
  g.raw("GGUX", 4).u32(3).u64(0).u64(0);
  EXPECT_THAT(parse_error(g),
              AllOf(HasSubstr("t.gguf: byte 0: magic"),
                    HasSubstr("expected \"GGUF\" (a GGUF model file), got \"GGUX\"")));
  GgufBytes short_file;
  short_file.raw("GG", 2);
  EXPECT_THAT(parse_error(short_file), AllOf(HasSubstr("byte 0: magic: expected 4 more bytes"),
                                             HasSubstr("end of file (2 bytes left; truncated?)")));
}

TEST(GgufErrors, UnsupportedVersions) {
  for (std::uint32_t version : {1u, 4u, 0xffffffffu}) {
    GgufBytes g;
    g.header(0, 0, version);
    EXPECT_THAT(parse_error(g), AllOf(HasSubstr("byte 4: version: expected 2 or 3"),
                                      HasSubstr("got " + std::to_string(version))));
  }
}

TEST(GgufErrors, TruncatedHeader) {
  GgufBytes full;
  full.header(0, 0);
  struct Case {
    std::size_t cut;
    const char* message;
  };
  for (const Case& c : {Case{6,
                             "byte 4: version: expected 4 more bytes, got end of file (2 bytes "
                             "left; truncated?)"},
                        Case{12,
                             "byte 8: tensor_count: expected 8 more bytes, got end of file (4 "
                             "bytes left"},
                        Case{23,
                             "byte 16: metadata_kv_count: expected 8 more bytes, got end of "
                             "file (7 bytes left"}}) {
    GgufBytes g = full;
    EXPECT_THAT(parse_error(g.truncate(c.cut)), HasSubstr(c.message)) << c.cut;
  }
}

TEST(GgufErrors, TruncatedInAKey) {
  TinyGguf spec = every_type_file();
  GgufBytes g = spec.build();
  // "i64", late enough that the metadata count still fits what is left of the file.
  const std::size_t at = spec.kv_at[14];
  GgufBytes in_length = g;
  EXPECT_THAT(parse_error(in_length.truncate(at + 3)),
              HasSubstr("byte " + std::to_string(at) +
                        ": metadata[14] key length: expected 8 more bytes, got end of file (3 "
                        "bytes left; truncated?)"));
  GgufBytes in_text = g;
  EXPECT_THAT(parse_error(in_text.truncate(at + 8 + 2)),
              HasSubstr("byte " + std::to_string(at) +
                        ": metadata[14] key length: expected at most 2 bytes (what is left of the "
                        "file), got 3"));
  GgufBytes in_type = g;
  EXPECT_THAT(parse_error(in_type.truncate(at + 8 + 3 + 2)),
              HasSubstr("byte " + std::to_string(at + 11) + ": i64 type: expected 4 more bytes"));
  GgufBytes in_value = g;  // inside the int64's 8 bytes, after "i64" and its type
  EXPECT_THAT(parse_error(in_value.truncate(at + 8 + 3 + 4 + 1)),
              HasSubstr("byte " + std::to_string(at + 15) +
                        ": i64: expected 8 more bytes, got end of file (1 bytes left"));
  // Too early: the metadata count no longer fits what is left.
  GgufBytes early = g;
  EXPECT_THAT(parse_error(early.truncate(100)),
              HasSubstr("byte 16: metadata_kv_count: expected at most 5 (all that the file's 100 "
                        "bytes can hold; the file is truncated or corrupt), got 21"));
}

TEST(GgufErrors, TruncatedInAnArray) {
  TinyGguf spec = every_type_file();
  GgufBytes g = spec.build();
  // "strs": key (8 + 4), type, element type, count, then "alpha", "beta", "gamma".
  const std::size_t strs = spec.kv_at[18];
  const std::size_t items = strs + 8 + 4 + 4 + 4 + 8;
  const std::size_t gamma = items + (8 + 5) + (8 + 4);
  GgufBytes in_item = g;
  EXPECT_THAT(parse_error(in_item.truncate(gamma + 8 + 2)),
              HasSubstr("byte " + std::to_string(gamma) +
                        ": strs[2] length: expected at most 2 bytes (what is left of the file), "
                        "got 5"));
  // Fixed-size items: the count is checked against what is left before anything is allocated.
  const std::size_t ints = spec.kv_at[16];
  const std::size_t count_at = ints + 8 + 4 + 4 + 4;
  GgufBytes in_ints = g;
  EXPECT_THAT(parse_error(in_ints.truncate(count_at + 8 + 9)),
              HasSubstr("byte " + std::to_string(count_at) +
                        ": ints count: expected at most 2 items (what is left of the file), got "
                        "3"));
  GgufBytes in_elem_type = g;
  EXPECT_THAT(parse_error(in_elem_type.truncate(count_at - 1)),
              HasSubstr("byte " + std::to_string(count_at - 4) +
                        ": ints element type: expected 4 more bytes"));
}

TEST(GgufErrors, TruncatedInTensorInfos) {
  TinyGguf spec = two_tensor_file();
  GgufBytes g = spec.build();
  const std::size_t b = spec.tensor_info_at[1];  // "b": name, n_dims, ne[0], type, offset
  GgufBytes in_ne = g;
  EXPECT_THAT(parse_error(in_ne.truncate(b + 9 + 4 + 3)),
              HasSubstr("byte " + std::to_string(b + 13) +
                        ": tensor \"b\" ne[0]: expected 8 more bytes, got end of file (3 bytes "
                        "left; truncated?)"));
  GgufBytes in_offset = g;
  EXPECT_THAT(parse_error(in_offset.truncate(spec.infos_end - 1)),
              HasSubstr("byte " + std::to_string(spec.infos_end - 8) +
                        ": tensor \"b\" offset: expected 8 more bytes"));
  GgufBytes in_name = g;
  EXPECT_THAT(parse_error(in_name.truncate(b + 4)),
              HasSubstr("byte " + std::to_string(b) + ": tensor[1] name length"));
}

TEST(GgufErrors, DataSectionCutShort) {
  TinyGguf spec = two_tensor_file();
  GgufBytes g = spec.build();
  // "b" takes [64, 88) of the data section; keep 80 bytes of it.
  GgufBytes short_data = g;
  EXPECT_THAT(parse_error(short_data.truncate(spec.data_offset + 80)),
              HasSubstr("t.gguf: tensor \"b\" data: expected bytes [64, 88) inside the data "
                        "section of 80 bytes, got a range past the end of the file (truncated?)"));
  // Ends right after the tensor infos: no data section at all.
  GgufBytes no_data = g;
  if (spec.infos_end % 32 != 0) {
    EXPECT_THAT(parse_error(no_data.truncate(spec.infos_end)),
                HasSubstr("byte " + std::to_string(spec.infos_end) +
                          ": data section: expected the tensor data after the header, got end of "
                          "file (truncated?)"));
  }
  GgufBytes empty_data = g;
  EXPECT_THAT(parse_error(empty_data.truncate(spec.data_offset)),
              HasSubstr("tensor \"a\" data: expected bytes [0, 40) inside the data section of 0 "
                        "bytes"));
}

TEST(GgufErrors, StringLongerThanTheFile) {
  GgufBytes key;
  key.header(0, 1).u64(1000).raw("general.name", 12).type(GgufType::kString).str("x");
  EXPECT_THAT(parse_error(key),
              HasSubstr("byte 24: metadata[0] key length: expected at most 25 bytes (what is left "
                        "of the file), got 1000"));
  GgufBytes value;
  value.header(0, 1).key("general.name", GgufType::kString).u64(~std::uint64_t{0}).raw("abc", 3);
  EXPECT_THAT(parse_error(value),
              HasSubstr("byte 48: general.name length: expected at most 3 bytes (what is left of "
                        "the file), got 18446744073709551615"));
  GgufBytes name;
  name.header(1, 0).u64(1ull << 40).zeros(40);
  EXPECT_THAT(parse_error(name), HasSubstr("byte 24: tensor[0] name length: expected at most 40 "
                                           "bytes (what is left of the file), got 1099511627776"));
}

TEST(GgufErrors, AbsurdCountsFailBeforeAllocating) {
  GgufBytes tensors;
  tensors.header(1ull << 62, 0).zeros(64);
  EXPECT_THAT(parse_error(tensors),
              HasSubstr("byte 8: tensor_count: expected at most 2 (all that the file's 88 bytes "
                        "can hold; the file is truncated or corrupt), got 4611686018427387904"));
  GgufBytes kvs;
  kvs.header(0, ~std::uint64_t{0}).zeros(26);
  EXPECT_THAT(parse_error(kvs),
              HasSubstr("byte 16: metadata_kv_count: expected at most 2 (all that the file's 50 "
                        "bytes can hold; the file is truncated or corrupt), got "
                        "18446744073709551615"));
  GgufBytes array;
  array.header(0, 1).key("a", GgufType::kArray).array_header(GgufType::kUint64, 1ull << 61);
  array.zeros(16);
  EXPECT_THAT(parse_error(array),
              HasSubstr("byte 41: a count: expected at most 2 items (what is left of the file), "
                        "got 2305843009213693952"));
  GgufBytes nested;  // arrays of arrays: each item takes at least 12 bytes
  nested.header(0, 1).key("a", GgufType::kArray).array_header(GgufType::kArray, 3).zeros(35);
  EXPECT_THAT(parse_error(nested), HasSubstr("a count: expected at most 2 items"));
}

TEST(GgufErrors, UnknownValueTypes) {
  GgufBytes g;
  g.header(0, 1).key("k", GgufType::kUint8);
  g.b[33] = std::byte{13};  // the type field
  g.u8(0).zeros(12);
  EXPECT_THAT(parse_error(g),
              HasSubstr("byte 33: k type: expected a GGUF value type in [0, 12], got 13"));
  GgufBytes elem;
  elem.header(0, 1).key("k", GgufType::kArray).u32(0xdeadbeef).u64(0);
  EXPECT_THAT(parse_error(elem), HasSubstr("byte 37: k element type: expected a GGUF value type "
                                           "in [0, 12], got 3735928559"));
}

TEST(GgufErrors, BoolMustBeZeroOrOne) {
  GgufBytes g;
  g.header(0, 1).key("flag", GgufType::kBool).u8(2).zeros(12);
  EXPECT_THAT(parse_error(g), HasSubstr("byte 40: flag: expected a bool (0 or 1), got 2"));
  GgufBytes in_array;
  in_array.header(0, 1)
      .key("flags", GgufType::kArray)
      .array_header(GgufType::kBool, 2)
      .u8(1)
      .u8(255);
  EXPECT_THAT(parse_error(in_array), HasSubstr("byte 54: flags[1]: expected a bool (0 or 1), got "
                                               "255"));
}

TEST(GgufErrors, DuplicateKey) {
  TinyGguf spec;
  spec.set_string("general.name", "a");
  spec.set_u32("x", 1);
  spec.kvs.emplace_back("general.name", typed_string("b"));
  const GgufBytes g = spec.build();
  EXPECT_THAT(parse_error(g),
              AllOf(HasSubstr("metadata[2] key"),
                    HasSubstr("expected a key not seen before, got \"general.name\"")));
}

TEST(GgufErrors, DuplicateTensorName) {
  TinyGguf spec = two_tensor_file();
  spec.tensors[1].name = "a";
  spec.tensors[1].dims = {6};
  const GgufBytes g = spec.build();
  EXPECT_THAT(parse_error(g), AllOf(HasSubstr("tensor \"a\" name"),
                                    HasSubstr("expected a tensor name not seen before, got "
                                              "\"a\"")));
}

// A file with one tensor info "t" (given raw) and `data` zero bytes of data.
GgufBytes one_tensor(const std::vector<std::uint64_t>& dims, std::uint32_t type,
                     std::uint64_t offset = 0, std::size_t data = 4096) {
  GgufBytes g;
  g.header(1, 0).tensor_info("t", dims, type, offset).pad(32).zeros(data);
  return g;
}

TEST(GgufErrors, DimensionCount) {
  EXPECT_THAT(parse_error(one_tensor({}, kF32)),
              HasSubstr("byte 33: tensor \"t\" n_dims: expected 1 to 4, got 0"));
  EXPECT_THAT(parse_error(one_tensor({1, 1, 1, 1, 1}, kF32)),
              HasSubstr("byte 33: tensor \"t\" n_dims: expected 1 to 4, got 5"));
  // Four is fine.
  const GgufBytes four = one_tensor({2, 1, 3, 1}, kF32);
  const GgufFile f(four.span(), "t.gguf");
  EXPECT_EQ(f.tensors()[0].num_elements(), 6);
  EXPECT_EQ(f.tensors()[0].num_bytes, 24u);
}

TEST(GgufErrors, ZeroDimension) {
  EXPECT_THAT(parse_error(one_tensor({4, 0}, kF32)),
              HasSubstr("byte 45: tensor \"t\" ne[1]: expected a positive size whose product fits "
                        "the file"));
  EXPECT_THAT(parse_error(one_tensor({0}, kF32)), HasSubstr("byte 37: tensor \"t\" ne[0]: expected "
                                                            "a positive size"));
}

TEST(GgufErrors, ElementCountOverflow) {
  // Each dimension fits the file; their product does not.
  const GgufBytes g = one_tensor({65536, 65536, 65536, 65536}, kQ4_0, 0, 200000);
  EXPECT_THAT(parse_error(g),
              AllOf(HasSubstr("byte 45: tensor \"t\" ne[1]"),
                    HasSubstr("a positive size whose product fits the file (200096 bytes)"),
                    HasSubstr("got 65536")));
  EXPECT_THAT(parse_error(one_tensor({~std::uint64_t{0}}, kF32)),
              HasSubstr("tensor \"t\" ne[0]: expected a positive size whose product fits the file "
                        "(4160 bytes), got 18446744073709551615"));
}

TEST(GgufErrors, ElementCountOverflowInAHugeFile) {
  // A 4 GiB span (reserved, never touched past the header): dims {2^32, 2^32} are each within
  // twice the file size, and their product (2^64) must not wrap to 0.
  const std::size_t size = std::size_t{1} << 32;
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  const GgufBytes head = one_tensor({1ull << 32, 1ull << 32}, kF32, 0, 0);
  std::memcpy(p, head.b.data(), head.at());
  const std::string msg = error_of(
      [&] { GgufFile f(std::span<const std::byte>(static_cast<std::byte*>(p), size), "big"); });
  munmap(p, size);
  EXPECT_THAT(msg, AllOf(HasSubstr("byte 45: tensor \"t\" ne[1]"),
                         HasSubstr("a positive size whose product fits the file")));
}

TEST(GgufErrors, UnknownGgmlType) {
  EXPECT_THAT(parse_error(one_tensor({32}, 99)),
              HasSubstr("byte 45: tensor \"t\" type: expected a ggml tensor type id, got 99"));
  EXPECT_THAT(parse_error(one_tensor({32}, 4)),  // Q4_2, retired
              HasSubstr("tensor \"t\" type: expected a ggml tensor type id, got 4"));
}

TEST(GgufErrors, RowNotAWholeNumberOfBlocks) {
  EXPECT_THAT(parse_error(one_tensor({33, 2}, kQ4_0)),
              HasSubstr("byte 37: tensor \"t\" ne[0]: expected a multiple of 32 (the Q4_0 block "
                        "size), got 33"));
  EXPECT_THAT(parse_error(one_tensor({128}, 12)),
              HasSubstr("tensor \"t\" ne[0]: expected a multiple of 256 (the Q4_K block size), "
                        "got 128"));
  const GgufBytes ok = one_tensor({64, 2}, kQ4_0);
  EXPECT_EQ(GgufFile(ok.span(), "t.gguf").tensors()[0].num_bytes, 4u * 18u);
}

TEST(GgufErrors, OffsetNotAligned) {
  EXPECT_THAT(parse_error(one_tensor({4}, kF32, 4)),
              HasSubstr("byte 49: tensor \"t\" offset: expected a multiple of the alignment 32, "
                        "got 4"));
}

TEST(GgufErrors, OffsetOrSizeOutOfRange) {
  EXPECT_THAT(parse_error(one_tensor({4}, kF32, 1ull << 40, 64)),
              HasSubstr("tensor \"t\" data: expected bytes [1099511627776, 1099511627792) inside "
                        "the data section of 64 bytes, got a range past the end of the file"));
  EXPECT_THAT(parse_error(one_tensor({32}, kF32, 32, 128)),
              HasSubstr("tensor \"t\" data: expected bytes [32, 160) inside the data section of "
                        "128 bytes"));
  // The largest aligned offset: offset + size must not wrap around.
  EXPECT_THAT(parse_error(one_tensor({4}, kF32, ~std::uint64_t{31}, 64)),
              HasSubstr("tensor \"t\" data: expected bytes [18446744073709551584, "));
  // Exactly filling the data section is fine.
  const GgufBytes exact = one_tensor({32}, kF32, 32, 160);
  EXPECT_EQ(GgufFile(exact.span(), "t.gguf").tensors()[0].num_bytes, 128u);
}

TEST(GgufErrors, OverlappingTensors) {
  TinyGguf spec = two_tensor_file();
  spec.tensors[0].offset = 32;  // "a" [32, 72)
  spec.tensors[1].offset = 64;  // "b" [64, 88)
  GgufBytes g = spec.build();
  g.zeros(128);
  const std::string msg = parse_error(g);
  EXPECT_THAT(msg, AllOf(HasSubstr("tensor \"b\" offset: expected data that does not overlap "
                                   "tensor \"a\" (ends at byte " +
                                   std::to_string(spec.data_offset + 72) + ")"),
                         HasSubstr("got byte " + std::to_string(spec.data_offset + 64))));
  spec.tensors[1].offset = 32;  // the same bytes
  GgufBytes same = spec.build();
  same.zeros(128);
  EXPECT_THAT(parse_error(same), HasSubstr("expected data that does not overlap"));
  spec.tensors[1].offset = 96;  // adjacent is fine
  GgufBytes adjacent = spec.build();
  adjacent.zeros(128);
  EXPECT_NO_THROW(GgufFile(adjacent.span(), "t.gguf"));
}

TEST(GgufErrors, AlignmentMustBeAUint32PowerOfTwo) {
  for (std::uint32_t a : {0u, 3u, 48u}) {
    TinyGguf spec = two_tensor_file();
    spec.set_u32("general.alignment", a);
    EXPECT_THAT(parse_error(spec.build()),
                HasSubstr("t.gguf: general.alignment: expected a uint32 power of two, got uint32 " +
                          std::to_string(a)));
  }
  TinyGguf wide = two_tensor_file();
  wide.set("general.alignment", typed(GgufType::kUint64, std::uint64_t{32}));
  EXPECT_THAT(parse_error(wide.build()),
              HasSubstr("general.alignment: expected a uint32 power of two, got uint64 32"));
  TinyGguf text = two_tensor_file();
  text.set_string("general.alignment", "32");
  EXPECT_THAT(parse_error(text.build()),
              HasSubstr("general.alignment: expected a uint32 power of two, got string \"32\""));
}

// ---------------------------------------------------------------------------------------------
// Llama models

struct Shape {
  int dim = 32, hidden = 64, layers = 2, heads = 2, kv_heads = 1, vocab = 40, ctx = 64;
  int head_dim() const { return dim / heads; }
};

// llama metadata for `s` (the vocabulary as a token list, no llama.vocab_size).
TinyGguf llama_metadata(const Shape& s) {
  TinyGguf g;
  g.set_string("general.architecture", "llama");
  g.set_string("general.name", "tiny");
  g.set_u32("llama.context_length", s.ctx);
  g.set_u32("llama.embedding_length", s.dim);
  g.set_u32("llama.block_count", s.layers);
  g.set_u32("llama.feed_forward_length", s.hidden);
  g.set_u32("llama.attention.head_count", s.heads);
  g.set_u32("llama.attention.head_count_kv", s.kv_heads);
  g.set_u32("llama.rope.dimension_count", s.head_dim());
  g.set_f32("llama.rope.freq_base", 500000.0f);
  g.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-6f);
  std::vector<std::string> tokens;
  for (int i = 0; i < s.vocab; ++i) tokens.push_back(std::string(1, 't').append(std::to_string(i)));
  g.set("tokenizer.ggml.tokens", typed_strings(tokens));
  return g;
}

TEST(GgufLlamaConfig, ReadsTheShape) {
  const Shape s;
  TinyGguf spec = llama_metadata(s);
  const GgufBytes bytes = spec.build();
  const ModelConfig c = gguf_model_config(GgufFile(bytes.span(), "t.gguf"));
  EXPECT_EQ(c.dim, 32);
  EXPECT_EQ(c.hidden_dim, 64);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_heads, 2);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.head_dim(), 16);
  EXPECT_EQ(c.seq_len, 64);
  EXPECT_EQ(c.vocab_size, 40);  // from the token list
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rms_eps, 1e-6f);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(c.kv_bytes_per_token(2), 2 * 2 * 1 * 16 * 2);
}

TEST(GgufLlamaConfig, DefaultsAndOtherVocabularySources) {
  const Shape s;
  TinyGguf spec = llama_metadata(s);
  spec.erase("llama.attention.head_count_kv");  // defaults to head_count
  spec.erase("llama.rope.freq_base");           // 10000
  spec.erase("llama.attention.layer_norm_rms_epsilon");
  spec.set_u32("llama.vocab_size", 77);  // the key wins over the token list
  spec.add_tensor("output.weight", {32, 77}, kF32, std::vector<std::byte>(32 * 77 * 4));
  GgufBytes bytes = spec.build();
  ModelConfig c = gguf_model_config(GgufFile(bytes.span(), "t.gguf"));
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rms_eps, 1e-5f);
  EXPECT_EQ(c.vocab_size, 77);
  EXPECT_FALSE(c.shared_classifier);  // output.weight is present

  // No key, no token list: the embedding's rows.
  spec.erase("llama.vocab_size");
  spec.erase("tokenizer.ggml.tokens");
  spec.add_tensor("token_embd.weight", {32, 50}, kF32, std::vector<std::byte>(32 * 50 * 4));
  bytes = spec.build();
  c = gguf_model_config(GgufFile(bytes.span(), "t.gguf"));
  EXPECT_EQ(c.vocab_size, 50);
}

// The error gguf_model_config throws for the tiny llama metadata changed by `edit`.
std::string config_error(const std::function<void(TinyGguf&)>& edit) {
  TinyGguf spec = llama_metadata(Shape{});
  edit(spec);
  const GgufBytes bytes = spec.build();
  return error_of([&] { (void)gguf_model_config(GgufFile(bytes.span(), "t.gguf")); });
}

TEST(GgufLlamaConfig, Errors) {
  EXPECT_THAT(config_error([](TinyGguf& g) { g.set_string("general.architecture", "qwen2"); }),
              HasSubstr("t.gguf: general.architecture: expected \"llama\" (kvscope runs "
                        "Llama-architecture models), got \"qwen2\""));
  EXPECT_THAT(config_error([](TinyGguf& g) { g.erase("general.architecture"); }),
              HasSubstr("general.architecture: expected a string metadata key, got none"));
  EXPECT_THAT(config_error([](TinyGguf& g) { g.erase("llama.block_count"); }),
              HasSubstr("t.gguf: llama.block_count: expected an integer metadata key, got none "
                        "(missing)"));
  EXPECT_THAT(config_error([](TinyGguf& g) { g.set_u32("llama.embedding_length", 0); }),
              HasSubstr("llama.embedding_length: expected an integer in [1, 65536], got 0"));
  EXPECT_THAT(config_error([](TinyGguf& g) { g.set_string("llama.context_length", "64"); }),
              HasSubstr("llama.context_length: expected a non-negative integer, got string"));
  EXPECT_THAT(config_error([](TinyGguf& g) {
                g.set_u32("llama.attention.head_count", 4);
                g.set_u32("llama.attention.head_count_kv", 3);
                g.set_u32("llama.rope.dimension_count", 8);
              }),
              HasSubstr("llama.attention.head_count_kv: expected a divisor of the head count 4, "
                        "got 3"));
  EXPECT_THAT(config_error([](TinyGguf& g) { g.set_u32("llama.attention.head_count_kv", 3); }),
              HasSubstr("llama.attention.head_count_kv: expected an integer in [1, 2], got 3"));
  EXPECT_THAT(config_error([](TinyGguf& g) { g.set_u32("llama.attention.head_count", 3); }),
              HasSubstr("llama.embedding_length: expected a multiple of the head count 3, got "
                        "32"));
  EXPECT_THAT(config_error([](TinyGguf& g) { g.set_u32("llama.rope.dimension_count", 8); }),
              AllOf(HasSubstr("llama.rope.dimension_count: expected 16 (embedding_length / "
                              "head_count"),
                    HasSubstr("got 8")));
  EXPECT_THAT(config_error([](TinyGguf& g) { g.set_u32("llama.attention.key_length", 32); }),
              HasSubstr("llama.attention.key_length: expected 16"));
  EXPECT_THAT(config_error([](TinyGguf& g) { g.set_string("llama.rope.scaling.type", "linear"); }),
              HasSubstr("llama.rope.scaling.type: expected none (plain RoPE), got \"linear\""));
  EXPECT_THAT(config_error([](TinyGguf& g) {
                g.add_tensor("rope_freqs.weight", {8}, kF32, std::vector<std::byte>(32));
              }),
              AllOf(HasSubstr("tensor \"rope_freqs.weight\": expected none (plain RoPE)"),
                    HasSubstr("Llama 3.1")));
  EXPECT_THAT(config_error([](TinyGguf& g) { g.set_u32("llama.vocab_size", 0); }),
              HasSubstr("t.gguf: llama.vocab_size: expected an integer in [1, 4194304], got 0"));
  EXPECT_THAT(config_error([](TinyGguf& g) { g.set("tokenizer.ggml.tokens", typed_strings({})); }),
              HasSubstr("t.gguf: llama.vocab_size (missing; derived from the file): expected an "
                        "integer in [1, 4194304], got 0"));
  EXPECT_THAT(config_error([](TinyGguf& g) { g.set_f32("llama.rope.freq_base", 1.0f); }),
              HasSubstr("llama.rope.freq_base: expected a number in (1, 1e12)"));
  EXPECT_THAT(
      config_error([](TinyGguf& g) { g.set_f32("llama.attention.layer_norm_rms_epsilon", 0); }),
      HasSubstr("llama.attention.layer_norm_rms_epsilon: expected a number in (0, 1)"));
}

TEST(GgufLlamaConfig, ScalingTypeNoneIsPlainRope) {
  TinyGguf spec = llama_metadata(Shape{});
  spec.set_string("llama.rope.scaling.type", "none");
  const GgufBytes bytes = spec.build();
  EXPECT_EQ(gguf_model_config(GgufFile(bytes.span(), "t.gguf")).dim, 32);
}

// A tiny llama model with tensors of several types and the fp32 values each must load as.
struct TinyModel {
  Shape shape;
  TinyGguf gguf;
  std::map<std::string, std::vector<float>> expected;  // ggml order: ne[0] contiguous

  // Adds tensor `name` of dims {cols, rows} (rows 0: a vector) holding values exactly
  // representable in `type`; unsupported types get zero bytes of the right size.
  void put(const std::string& name, std::int64_t cols, std::int64_t rows, std::uint32_t type) {
    const int salt = static_cast<int>(expected.size()) + 1;
    const std::int64_t n = cols * std::max<std::int64_t>(rows, 1);
    std::vector<float> values(static_cast<std::size_t>(n));
    std::vector<std::byte> data;
    if (type == kF32) {
      for (std::int64_t i = 0; i < n; ++i)
        values[i] = std::sin(static_cast<float>(salt * 1000 + i));
      data = f32_bytes(values);
    } else if (type == kF16) {
      for (std::int64_t i = 0; i < n; ++i) {
        values[i] = static_cast<float>((salt * 7 + i * 3) % 61 - 30) / 16.0f;
        const std::uint16_t h = fp16_bits(values[i]);
        data.push_back(static_cast<std::byte>(h & 0xff));
        data.push_back(static_cast<std::byte>(h >> 8));
      }
    } else if (type == kQ8_0) {
      for (std::int64_t block = 0; block < n / 32; ++block) {
        const float d = 0.25f * static_cast<float>(1 + (salt + block) % 3);
        const std::uint16_t h = fp16_bits(d);
        data.push_back(static_cast<std::byte>(h & 0xff));
        data.push_back(static_cast<std::byte>(h >> 8));
        for (std::int64_t j = 0; j < 32; ++j) {
          const std::int64_t i = block * 32 + j;
          const auto q = static_cast<std::int8_t>((salt * 11 + i * 5) % 255 - 127);
          values[i] = d * static_cast<float>(q);
          data.push_back(static_cast<std::byte>(q));
        }
      }
    } else {
      data.resize(
          static_cast<std::size_t>(ggml_row_bytes(type, cols) * std::max<std::int64_t>(rows, 1)));
    }
    std::vector<std::uint64_t> dims{static_cast<std::uint64_t>(cols)};
    if (rows > 0) dims.push_back(static_cast<std::uint64_t>(rows));
    gguf.add_tensor(name, dims, type, std::move(data));
    expected[name] = std::move(values);
  }

  explicit TinyModel(bool separate_output) : gguf(llama_metadata(shape)) {
    const Shape& s = shape;
    const int kv = s.kv_heads * s.head_dim();
    put("token_embd.weight", s.dim, s.vocab, kF16);
    for (int l = 0; l < s.layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      put(p + "attn_norm.weight", s.dim, 0, kF32);
      put(p + "attn_q.weight", s.dim, s.dim, kQ8_0);
      put(p + "attn_k.weight", s.dim, kv, kF32);
      put(p + "attn_v.weight", s.dim, kv, kF16);
      put(p + "attn_output.weight", s.dim, s.dim, kQ8_0);
      put(p + "ffn_norm.weight", s.dim, 0, kF32);
      put(p + "ffn_gate.weight", s.dim, s.hidden, kQ8_0);
      put(p + "ffn_down.weight", s.hidden, s.dim, kF16);
      put(p + "ffn_up.weight", s.dim, s.hidden, kF32);
    }
    put("output_norm.weight", s.dim, 0, kF32);
    if (separate_output) put("output.weight", s.dim, s.vocab, kQ8_0);
  }
};

// Expects got[0, want.size()) == want exactly, reporting the first difference.
void expect_floats(const float* got, const std::vector<float>& want, const std::string& what) {
  ASSERT_NE(got, nullptr) << what;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
      return;
    }
  }
}

// Checks every weight of `m` against the values `tiny` stored.
void expect_weights(const Model& m, const TinyModel& tiny) {
  const Weights& w = m.weights();
  const Shape& s = tiny.shape;
  const std::int64_t d = s.dim, kv = s.kv_heads * s.head_dim(), h = s.hidden;
  auto want = [&](const std::string& name) -> const std::vector<float>& {
    return tiny.expected.at(name);
  };
  expect_floats(w.token_embedding, want("token_embd.weight"), "token_embedding");
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    expect_floats(w.rms_att + l * d, want(p + "attn_norm.weight"), p + "rms_att");
    expect_floats(w.wq + l * d * d, want(p + "attn_q.weight"), p + "wq");
    expect_floats(w.wk + l * kv * d, want(p + "attn_k.weight"), p + "wk");
    expect_floats(w.wv + l * kv * d, want(p + "attn_v.weight"), p + "wv");
    expect_floats(w.wo + l * d * d, want(p + "attn_output.weight"), p + "wo");
    expect_floats(w.rms_ffn + l * d, want(p + "ffn_norm.weight"), p + "rms_ffn");
    expect_floats(w.w1 + l * h * d, want(p + "ffn_gate.weight"), p + "w1");
    expect_floats(w.w2 + l * d * h, want(p + "ffn_down.weight"), p + "w2");
    expect_floats(w.w3 + l * h * d, want(p + "ffn_up.weight"), p + "w3");
  }
  expect_floats(w.rms_final, want("output_norm.weight"), "rms_final");
}

TEST(GgufLlamaLoad, TiedEmbeddingsLoadExactly) {
  TinyModel tiny(false);
  const GgufBytes bytes = tiny.gguf.build();
  const GgufFile f(bytes.span(), "tiny.gguf");
  const auto model = load_gguf_model(f);
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.dim, 32);
  EXPECT_EQ(c.hidden_dim, 64);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.vocab_size, 40);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(model->format(), CheckpointFormat::kGguf);
  EXPECT_EQ(model->source(), "tiny.gguf");
  EXPECT_EQ(model->weight_types(), "F16 x5, F32 x9, Q8_0 x6");
  expect_weights(*model, tiny);
  EXPECT_EQ(model->weights().wcls, model->weights().token_embedding);
  // Spot checks by hand: a Q8_0 element is d * q, an F16 one k / 16.
  const auto& wq0 = tiny.expected.at("blk.0.attn_q.weight");
  EXPECT_EQ(model->weights().wq[33], wq0[33]);
  EXPECT_NE(wq0[33], 0.0f);
  EXPECT_EQ(model->weights().token_embedding[39 * 32 + 31],
            tiny.expected.at("token_embd.weight").back());
}

TEST(GgufLlamaLoad, SeparateClassifierLoads) {
  TinyModel tiny(true);
  const GgufBytes bytes = tiny.gguf.build();
  const auto model = load_gguf_model(GgufFile(bytes.span(), "tiny.gguf"));
  EXPECT_FALSE(model->config().shared_classifier);
  EXPECT_EQ(model->weight_types(), "F16 x5, F32 x9, Q8_0 x7");
  expect_weights(*model, tiny);
  EXPECT_NE(model->weights().wcls, model->weights().token_embedding);
  expect_floats(model->weights().wcls, tiny.expected.at("output.weight"), "wcls");
}

TEST(GgufLlamaLoad, LoadsThroughModelLoad) {
  TinyModel tiny(false);
  const GgufBytes bytes = tiny.gguf.build();
  const std::string path = test::temp_path("tiny_llama.gguf");
  const auto* p = reinterpret_cast<const char*>(bytes.b.data());
  test::write_bytes(path, std::vector<char>(p, p + bytes.at()));
  const auto model = Model::load(path);
  EXPECT_EQ(model->format(), CheckpointFormat::kGguf);
  expect_weights(*model, tiny);
  EXPECT_EQ(read_checkpoint_config(path).vocab_size, 40);
}

// The error load_gguf_model throws for the tiny model changed by `edit`.
std::string load_error(const std::function<void(TinyModel&)>& edit) {
  TinyModel tiny(false);
  edit(tiny);
  const GgufBytes bytes = tiny.gguf.build();
  return error_of([&] { (void)load_gguf_model(GgufFile(bytes.span(), "t.gguf")); });
}

TEST(GgufLlamaLoad, Errors) {
  EXPECT_THAT(load_error([](TinyModel& m) { m.gguf.remove_tensor("blk.1.ffn_up.weight"); }),
              HasSubstr("t.gguf: tensor \"blk.1.ffn_up.weight\": expected a tensor of shape [32, "
                        "64], got none (missing)"));
  EXPECT_THAT(load_error([](TinyModel& m) { m.put("blk.0.attn_k.weight", 32, 32, kF32); }),
              HasSubstr("tensor \"blk.0.attn_k.weight\" shape: expected [32, 16] (ggml order, "
                        "from the metadata), got [32, 32]"));
  EXPECT_THAT(load_error([](TinyModel& m) { m.put("output_norm.weight", 32, 2, kF32); }),
              HasSubstr("tensor \"output_norm.weight\" shape: expected [32] (ggml order, from the "
                        "metadata), got [32, 2]"));
  EXPECT_THAT(load_error([](TinyModel& m) { m.put("blk.1.ffn_down.weight", 32, 64, kF16); }),
              HasSubstr("tensor \"blk.1.ffn_down.weight\" shape: expected [64, 32]"));
  EXPECT_THAT(load_error([](TinyModel& m) { m.put("blk.0.attn_q.weight", 32, 32, kQ5_0); }),
              HasSubstr("tensor \"blk.0.attn_q.weight\" type: expected F32, F16, BF16, Q4_0, Q4_1, "
                        "Q8_0, Q4_K or Q6_K, got Q5_0"));
  EXPECT_THAT(load_error([](TinyModel& m) { m.put("blk.0.attn_q_norm.weight", 16, 0, kF32); }),
              HasSubstr("tensor \"blk.0.attn_q_norm.weight\": expected only the tensors of a Llama "
                        "model"));
  EXPECT_THAT(load_error([](TinyModel& m) { m.gguf.set_string("general.architecture", "qwen2"); }),
              HasSubstr("general.architecture: expected \"llama\""));
  // An odd head size cannot be rotated pairwise.
  EXPECT_THAT(load_error([](TinyModel& m) {
                m.shape.heads = 32;
                m.gguf.set_u32("llama.attention.head_count", 32);
                m.gguf.set_u32("llama.attention.head_count_kv", 32);
                m.gguf.set_u32("llama.rope.dimension_count", 1);
                m.put("blk.0.attn_k.weight", 32, 32, kF32);
                m.put("blk.0.attn_v.weight", 32, 32, kF16);
                m.put("blk.1.attn_k.weight", 32, 32, kF32);
                m.put("blk.1.attn_v.weight", 32, 32, kF16);
              }),
              HasSubstr("an even head size"));
}

// ---------------------------------------------------------------------------------------------
// The real model

std::string smollm2_path() {
  try {
    return locate_model("smollm2");
  } catch (const Error& e) {
    ADD_FAILURE() << "SmolLM2-135M-Instruct.Q4_1.gguf is missing: run scripts/models.sh ("
                  << e.what() << ")";
    return "";
  }
}

TEST(GgufSmolLM2, FileParses) {
  const std::string path = smollm2_path();
  ASSERT_FALSE(path.empty());
  const GgufFile f(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.tensors().size(), 272u);
  EXPECT_EQ(f.metadata().size(), 33u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset(), 1785664u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens").size(), 49152u);
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens")[1], "<|im_start|>");
  EXPECT_EQ(f.get_int_array("tokenizer.ggml.token_type").size(), 49152u);
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.merges").size(), 48900u);
  EXPECT_EQ(f.get_bool("tokenizer.ggml.add_bos_token"), false);
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->describe(), "[49152 string]");
  EXPECT_EQ(f.get_uint("tokenizer.ggml.eos_token_id"), 2u);

  const GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, kQ8_0);
  EXPECT_EQ(emb->dims, (std::vector<std::int64_t>{576, 49152}));
  EXPECT_EQ(emb->offset, 1785664u);
  EXPECT_EQ(emb->num_bytes, 30081024u);
  const GgufTensorInfo* norm = f.find_tensor("output_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->offset, 98360128u);
  float first[3];
  std::memcpy(first, f.tensor_bytes(*norm).data(), sizeof first);
  EXPECT_EQ(first[0], 1.7578125f);  // values read with PyPI gguf's GGUFReader
  EXPECT_EQ(first[1], 1.8203125f);
  EXPECT_EQ(first[2], 1.78125f);
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);
  EXPECT_EQ(f.find_tensor("blk.29.ffn_down.weight")->type, 3u);  // Q4_1
}

TEST(GgufSmolLM2, ConfigAndWeights) {
  const std::string path = smollm2_path();
  ASSERT_FALSE(path.empty());
  const GgufFile f(path);
  const ModelConfig c = gguf_model_config(f);
  EXPECT_EQ(c.dim, 576);
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.n_heads, 9);
  EXPECT_EQ(c.n_kv_heads, 3);
  EXPECT_EQ(c.head_dim(), 64);
  EXPECT_EQ(c.hidden_dim, 1536);
  EXPECT_EQ(c.seq_len, 8192);
  EXPECT_EQ(c.rope_theta, 100000.0f);
  EXPECT_EQ(c.rms_eps, 1e-5f);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(c.kv_bytes_per_token(2), 23040);

  const auto model = load_gguf_model(f);
  EXPECT_EQ(model->weight_types(), "F32 x61, Q4_1 x210, Q8_0 x1");
  const Weights& w = model->weights();
  EXPECT_EQ(w.wcls, w.token_embedding);
  // Row 1 of the Q8_0 embedding and output_norm, as PyPI gguf's dequantize gives them.
  EXPECT_EQ(w.token_embedding[576 + 0], -0.0238037109375f);
  EXPECT_EQ(w.token_embedding[576 + 1], -0.015869140625f);
  EXPECT_EQ(w.token_embedding[576 + 2], -0.0396728515625f);
  EXPECT_EQ(w.rms_final[0], 1.7578125f);
  EXPECT_EQ(w.rms_final[575], 1.984375f);
}

// Native weights hold no fp32 copy of the quantized matrices until something asks: only the 61
// F32 norms are fp32 at load; the forward pass reads embedding rows from the Q8_0 blocks, the same
// bits as dequantize_row; weights() (asked from four threads at once) dequantizes the matrices
// once, to exactly what --weight-format f32 holds.
TEST(GgufSmolLM2, NativeHoldsNoFp32CopyUntilAsked) {
  const std::string path = smollm2_path();
  ASSERT_FALSE(path.empty());
  const GgufFile f(path);
  const auto model = load_gguf_model(f, WeightFormat::kNative);
  const ModelConfig& c = model->config();
  ASSERT_NE(model->native(), nullptr);
  const std::int64_t norms = (2 * std::int64_t{c.n_layers} + 1) * c.dim * 4;
  const std::int64_t all = c.num_params() * 4;
  EXPECT_FALSE(model->f32_complete());
  EXPECT_EQ(model->weight_bytes(), norms);
  EXPECT_EQ(model->lazy_f32_bytes(), all - norms);

  const GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  const std::int64_t row_bytes = ggml_row_bytes(emb->type, c.dim);
  std::vector<float> ours(static_cast<std::size_t>(c.dim)), ref(ours.size());
  for (int token : {0, 1, 2, 1000, c.vocab_size - 1}) {
    model->embedding_row(token, ours.data());
    dequantize_row(static_cast<GgmlType>(emb->type),
                   f.tensor_bytes(*emb).data() + token * row_bytes, ref.data(), c.dim);
    EXPECT_EQ(std::memcmp(ours.data(), ref.data(), ours.size() * 4), 0) << "token " << token;
  }
  EXPECT_FALSE(model->f32_complete());

  std::vector<const Weights*> seen(4);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < seen.size(); ++i)
    threads.emplace_back([&, i] { seen[i] = &model->weights(); });
  for (std::thread& t : threads) t.join();
  for (const Weights* w : seen) EXPECT_EQ(w, &model->forward_weights());
  EXPECT_TRUE(model->f32_complete());
  EXPECT_EQ(model->weight_bytes(), all);
  EXPECT_EQ(model->lazy_f32_bytes(), 0);

  const auto f32 = load_gguf_model(f, WeightFormat::kF32);
  EXPECT_TRUE(f32->f32_complete());
  EXPECT_EQ(f32->weight_bytes(), all);
  // The legacy layout is one run of num_params() floats from the embedding on.
  EXPECT_EQ(std::memcmp(model->weights().token_embedding, f32->weights().token_embedding,
                        static_cast<std::size_t>(all)),
            0);
  model->embedding_row(c.vocab_size - 1, ours.data());
  EXPECT_EQ(std::memcmp(ours.data(),
                        f32->weights().token_embedding + std::int64_t{c.vocab_size - 1} * c.dim,
                        ours.size() * 4),
            0);
}

}  // namespace
}  // namespace kvscope

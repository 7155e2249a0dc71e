// KvFormat byte accounting, names and parsing.
#include "engine/kv/kv_format.h"

#include <algorithm>

#include "engine/common/error.h"

namespace kvscope {
namespace {

constexpr std::size_t kHalf = 2;  // scales and zero points are 16-bit (fp16; bf16 for fp8 scales)

struct NamedDtype {
  const char* name;
  KvDtype dtype;
};
constexpr NamedDtype kNames[] = {
    {"fp32", KvDtype::kF32},         {"fp16", KvDtype::kF16},         {"bf16", KvDtype::kBF16},
    {"fp8-e4m3", KvDtype::kFp8E4M3}, {"fp8-e5m2", KvDtype::kFp8E5M2}, {"int8", KvDtype::kInt8},
    {"int4", KvDtype::kInt4},        {"int2", KvDtype::kInt2},        {"kivi2", KvDtype::kKivi2},
    {"kivi4", KvDtype::kKivi4},
};

bool uses_groups(KvDtype d) {
  return d == KvDtype::kInt4 || d == KvDtype::kInt2 || d == KvDtype::kKivi2 || d == KvDtype::kKivi4;
}

bool is_power_of_two(int v) {
  return v > 0 && (v & (v - 1)) == 0;
}

}  // namespace

int KvFormat::bits() const {
  switch (dtype) {
    case KvDtype::kF32:
      return 32;
    case KvDtype::kF16:
    case KvDtype::kBF16:
      return 16;
    case KvDtype::kFp8E4M3:
    case KvDtype::kFp8E5M2:
    case KvDtype::kInt8:
      return 8;
    case KvDtype::kInt4:
    case KvDtype::kKivi4:
      return 4;
    case KvDtype::kInt2:
    case KvDtype::kKivi2:
      return 2;
  }
  return 32;
}

int KvFormat::effective_group(int kv_dim) const {
  return std::max(1, std::min(group_size, kv_dim));
}

std::size_t KvFormat::row_bytes(int kv_heads, int head_dim) const {
  const std::size_t bits_per_row = static_cast<std::size_t>(kv_heads) * head_dim * bits();
  return (bits_per_row + 7) / 8;
}

std::size_t KvFormat::token_meta_bytes(int kv_heads, int head_dim, KvKind kind) const {
  const int kv_dim = kv_heads * head_dim;
  switch (dtype) {
    case KvDtype::kFp8E4M3:
    case KvDtype::kFp8E5M2:
    case KvDtype::kInt8:
      return static_cast<std::size_t>(kv_heads) * kHalf;  // scale per head
    case KvDtype::kInt4:
    case KvDtype::kInt2: {
      const int g = effective_group(kv_dim);
      return static_cast<std::size_t>((kv_dim + g - 1) / g) * 2 * kHalf;  // scale + zero per group
    }
    case KvDtype::kKivi2:
    case KvDtype::kKivi4: {
      if (kind == KvKind::kKey) return 0;  // keys carry channel scales per tile instead
      const int g = effective_group(kv_dim);
      return static_cast<std::size_t>((kv_dim + g - 1) / g) * 2 * kHalf;
    }
    default:
      return 0;
  }
}

std::size_t KvFormat::tile_meta_bytes(int block_size, int kv_heads, int head_dim,
                                      KvKind kind) const {
  if (!is_kivi() || kind != KvKind::kKey) return 0;
  // One set of per-channel (scale, zero) per key group the tile holds tokens of. A tile smaller
  // than the group keeps a full copy of its group's set so every tile decodes on its own.
  const int sets = std::max(1, block_size / std::max(1, residual));
  return static_cast<std::size_t>(sets) * kv_heads * head_dim * 2 * kHalf;
}

std::size_t KvFormat::tile_bytes(int block_size, int kv_heads, int head_dim, KvKind kind) const {
  return static_cast<std::size_t>(block_size) *
             (row_bytes(kv_heads, head_dim) + token_meta_bytes(kv_heads, head_dim, kind)) +
         tile_meta_bytes(block_size, kv_heads, head_dim, kind);
}

double KvFormat::bytes_per_token(int block_size, int kv_heads, int head_dim, KvKind kind) const {
  return static_cast<double>(tile_bytes(block_size, kv_heads, head_dim, kind)) / block_size;
}

std::size_t KvFormat::staging_bytes_per_sequence(int kv_heads, int head_dim) const {
  if (!is_kivi()) return 0;
  return static_cast<std::size_t>(residual) * kv_heads * head_dim * sizeof(float);
}

void KvFormat::validate(int block_size, int kv_heads, int head_dim,
                        const std::string& where) const {
  const int kv_dim = kv_heads * head_dim;
  if ((static_cast<long>(kv_dim) * bits()) % 8 != 0) {
    fail_expected(where,
                  name() + " rows of whole bytes (kv_heads x head_dim x " + std::to_string(bits()) +
                      " bits a multiple of 8)",
                  std::to_string(kv_dim) + " values");
  }
  if (uses_groups(dtype)) {
    const int g = effective_group(kv_dim);
    if (group_size < 1 || kv_dim % g != 0) {
      fail_expected(
          where, name() + " group size dividing the row of " + std::to_string(kv_dim) + " values",
          std::to_string(group_size));
    }
  }
  if (is_kivi()) {
    if (!is_power_of_two(residual) || (block_size % residual != 0 && residual % block_size != 0)) {
      fail_expected(where,
                    name() + " residual (a power of two dividing or divided by block size " +
                        std::to_string(block_size) + ")",
                    std::to_string(residual));
    }
  }
}

std::string KvFormat::name() const {
  std::string base = "?";
  for (const auto& n : kNames) {
    if (n.dtype == dtype) base = n.name;
  }
  if (is_kivi() && residual != 32) base += "-r" + std::to_string(residual);
  if (uses_groups(dtype) && group_size != 32) base += "-g" + std::to_string(group_size);
  return base;
}

std::vector<std::string> kv_format_names() {
  std::vector<std::string> names;
  for (const auto& n : kNames) names.emplace_back(n.name);
  return names;
}

KvFormat parse_kv_format(const std::string& name, const std::string& where) {
  auto fail = [&]() -> void {
    std::string names;
    for (const auto& n : kv_format_names()) names += (names.empty() ? "" : ", ") + n;
    fail_expected(where, "a KV format (" + names + "; int4/int2/kivi take -gN, kivi -rN)",
                  "'" + name + "'");
  };
  if (name == "f32") return KvFormat{KvDtype::kF32};
  if (name == "f16") return KvFormat{KvDtype::kF16};
  if (name == "e4m3" || name == "fp8") return KvFormat{KvDtype::kFp8E4M3};
  if (name == "e5m2") return KvFormat{KvDtype::kFp8E5M2};
  for (const auto& n : kNames) {
    const std::string base = n.name;
    if (name.rfind(base, 0) != 0) continue;
    KvFormat f{n.dtype};
    std::string rest = name.substr(base.size());
    if (!rest.empty() && rest[0] != '-') continue;  // "int4x" is not int4
    while (!rest.empty()) {
      // rest = "-gN..." or "-rN..."
      if (rest.size() < 3 || rest[0] != '-') fail();
      const char key = rest[1];
      std::size_t end = rest.find('-', 2);
      const std::string digits =
          rest.substr(2, end == std::string::npos ? std::string::npos : end - 2);
      if (digits.empty() || digits.size() > 6 ||
          digits.find_first_not_of("0123456789") != std::string::npos) {
        fail();
      }
      const int v = std::stoi(digits);
      if (v < 1) fail();
      if (key == 'g' && uses_groups(f.dtype))
        f.group_size = v;
      else if (key == 'r' && f.is_kivi())
        f.residual = v;
      else
        fail();
      rest = end == std::string::npos ? "" : rest.substr(end);
    }
    return f;
  }
  fail();
  return {};
}

}  // namespace kvscope

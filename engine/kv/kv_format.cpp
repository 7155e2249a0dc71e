// KvFormat byte accounting and names.
#include "engine/kv/kv_format.h"

#include "engine/common/error.h"

namespace kvscope {

std::size_t KvFormat::tile_bytes(int block_size, int kv_heads, int head_dim) const {
  const std::size_t values = static_cast<std::size_t>(block_size) * kv_heads * head_dim;
  switch (dtype) {
    case KvDtype::kF32:
      return values * sizeof(float);
  }
  return 0;
}

double KvFormat::bytes_per_token(int block_size, int kv_heads, int head_dim) const {
  return static_cast<double>(tile_bytes(block_size, kv_heads, head_dim)) / block_size;
}

std::string KvFormat::name() const {
  switch (dtype) {
    case KvDtype::kF32:
      return "fp32";
  }
  return "?";
}

std::vector<std::string> kv_format_names() { return {"fp32"}; }

KvFormat parse_kv_format(const std::string& name, const std::string& where) {
  if (name == "fp32" || name == "f32") return KvFormat{KvDtype::kF32};
  std::string names;
  for (const auto& n : kv_format_names()) names += (names.empty() ? "" : ", ") + n;
  fail_expected(where, "a KV format (" + names + ")", "'" + name + "'");
}

}  // namespace kvscope

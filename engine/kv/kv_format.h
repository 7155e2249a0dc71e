// KvFormat: how K or V values are stored in the pool. A "tile" is one block's worth of one layer's
// K (or V): [block_size tokens][kv_heads][head_dim] values plus whatever metadata the format needs.
// Byte accounting here is exact: memory figures anywhere in kvscope come from these functions.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace kvscope {

enum class KvDtype {
  kF32,
};

struct KvFormat {
  KvDtype dtype = KvDtype::kF32;

  // Bytes of one tile of `block_size` tokens x `kv_heads` x `head_dim` values.
  std::size_t tile_bytes(int block_size, int kv_heads, int head_dim) const;
  // Average bytes per token per layer for one of K or V (tile_bytes / block_size).
  double bytes_per_token(int block_size, int kv_heads, int head_dim) const;
  std::string name() const;
  bool operator==(const KvFormat&) const = default;
};

// Parses "fp32", ...; throws kvscope::Error naming `where` and the accepted names.
KvFormat parse_kv_format(const std::string& name, const std::string& where);
std::vector<std::string> kv_format_names();

}  // namespace kvscope

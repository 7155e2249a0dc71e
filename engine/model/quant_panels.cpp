// See quant_panels.h.
#include "engine/model/quant_panels.h"

#include <cstring>

#include "engine/common/error.h"

namespace kvscope {
namespace {

constexpr int kBlock = 32;  // elements per Q4_0 / Q4_1 / Q8_0 block

template <GgmlType T>
void write_panels(const std::byte* w, std::int64_t row_bytes, std::int64_t rows, std::int64_t n,
                  std::byte* out) {
  constexpr int bb = native_block_bytes(T);
  constexpr int qb = panel_quant_bytes(T);
  constexpr int pb = panel_block_bytes(T);
  const std::int64_t nb = n / kBlock;
  const std::int64_t np = (rows + kPanelRows - 1) / kPanelRows;
  std::memset(out, 0, static_cast<std::size_t>(np * nb * pb));
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t p = r / kPanelRows;
    const int j = static_cast<int>(r % kPanelRows);
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::byte* blk = w + r * row_bytes + b * bb;
      const std::byte* qs = blk + native_quants_offset(T);
      std::byte* dst = out + (p * nb + b) * pb;
      constexpr int groups = qb / 64;
      for (int k = 0; k < groups; ++k) {
        for (int e = 0; e < 4; ++e) {
          std::byte v = qs[4 * k + e];
          if constexpr (T == GgmlType::kQ8_0) v ^= std::byte{0x80};
          dst[64 * k + 4 * j + e] = v;
        }
      }
      std::memcpy(dst + qb + 2 * j, blk, 2);
      if constexpr (T == GgmlType::kQ4_1) std::memcpy(dst + qb + 32 + 2 * j, blk + 2, 2);
    }
  }
}

}  // namespace

bool quant_panels_made() {
#if defined(__x86_64__) || defined(__i386__)
  return true;
#else
  return false;
#endif
}

std::size_t quant_panel_bytes(GgmlType type, std::int64_t rows, std::int64_t n) {
  const std::int64_t panels = (rows + kPanelRows - 1) / kPanelRows;
  return static_cast<std::size_t>(panels) * static_cast<std::size_t>(n / kBlock) *
         static_cast<std::size_t>(panel_block_bytes(type));
}

void make_quant_panels(GgmlType type, const std::byte* w, std::int64_t row_bytes, std::int64_t rows,
                       std::int64_t n, std::byte* out) {
  if (!has_native_matmul(type) || n % kBlock != 0) {
    throw InternalError("make_quant_panels", "no panels for this matrix");
  }
  switch (type) {
    case GgmlType::kQ4_0:
      return write_panels<GgmlType::kQ4_0>(w, row_bytes, rows, n, out);
    case GgmlType::kQ4_1:
      return write_panels<GgmlType::kQ4_1>(w, row_bytes, rows, n, out);
    default:
      return write_panels<GgmlType::kQ8_0>(w, row_bytes, rows, n, out);
  }
}

}  // namespace kvscope

#include "engine/common/interconnect.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "engine/common/error.h"

namespace kvscope {

const std::vector<Link>& link_presets() {
  static const std::vector<Link> presets = {
      {"nvlink3", 300e9, "A100 NVLink 3, per direction (Ring Attention's A100 NVLink row)"},
      {"nvlink4", 450e9, "H100 SXM NVLink 4, per direction (900 GB/s both ways)"},
      {"pcie5", 63e9, "PCIe 5.0 x16, per direction (32 GT/s x 16 lanes, 128b/130b)"},
      {"rdma400", 50e9, "a 400 Gb/s NIC: NDR InfiniBand or RoCE"},
      {"ib100", 12.5e9, "100 Gb/s InfiniBand (Ring Attention's A100 InfiniBand row)"},
  };
  return presets;
}

Link parse_link(const std::string& text, const std::string& where) {
  for (const Link& l : link_presets()) {
    if (l.name == text) return l;
  }
  std::string names;
  for (const Link& l : link_presets()) {
    if (!names.empty()) names += ", ";
    names += l.name;
  }
  const std::string expected = "a link (" + names + ") or a bandwidth such as 100GB/s or 400Gb/s";
  const char* begin = text.c_str();
  char* end = nullptr;
  const double value = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(value) || value <= 0) fail_expected(where, expected, text);
  std::string unit(end);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  double scale = 0;
  if (unit == "GB/s") scale = 1e9;
  if (unit == "Gb/s") scale = 1e9 / 8;
  if (unit == "TB/s") scale = 1e12;
  if (unit == "MB/s") scale = 1e6;
  if (scale == 0 || !std::isfinite(value * scale)) fail_expected(where, expected, text);
  return Link{text, value * scale, "given"};
}

}  // namespace kvscope

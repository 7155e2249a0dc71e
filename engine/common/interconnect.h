// Links between devices, as the KV arithmetic prices them: named presets with their one-way
// bandwidth (what a transfer in one direction gets; NVLink's headline figures count both
// directions), or a bandwidth given with its unit. Used by ring attention's timing
// (engine/analysis/memory_math.h).
#pragma once

#include <string>
#include <vector>

namespace kvscope {

struct Link {
  std::string name;               // "nvlink4", or the text a custom bandwidth was given as
  double bytes_per_second = 0.0;  // one direction
  std::string what;               // where the figure comes from
};

// nvlink3, nvlink4, pcie5, rdma400, ib100, in that order.
const std::vector<Link>& link_presets();

// A preset's name, or a bandwidth with its unit: "450GB/s" (10^9 bytes), "400Gb/s" (10^9 bits),
// "12.5 GB/s". Throws kvscope::Error naming `where`, the value and what was expected.
Link parse_link(const std::string& text, const std::string& where);

}  // namespace kvscope

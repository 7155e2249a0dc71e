// See kernel_trace.h.
#include "kernels/sim/kernel_trace.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

namespace kvscope::sim {
namespace {

constexpr std::uintptr_t kSector = 32, kLine = 128;

long ceil_div(long a, long b) {
  return (a + b - 1) / b;
}

// Distinct bytes of the ranges, merged (sorts them).
long distinct_bytes(std::vector<std::pair<std::uintptr_t, unsigned>>& ranges) {
  std::sort(ranges.begin(), ranges.end());
  long total = 0;
  std::uintptr_t end = 0;
  bool any = false;
  for (const auto& [a, n] : ranges) {
    const std::uintptr_t b = a + n;
    if (!any || a >= end) {
      total += static_cast<long>(n);
      end = b;
      any = true;
    } else if (b > end) {
      total += static_cast<long>(b - end);
      end = b;
    }
  }
  return total;
}

long units_touched(const std::vector<std::pair<std::uintptr_t, unsigned>>& ranges,
                   std::uintptr_t unit) {
  std::set<std::uintptr_t> ids;
  for (const auto& [a, n] : ranges) {
    if (n == 0) continue;
    for (std::uintptr_t u = a / unit; u <= (a + n - 1) / unit; ++u) ids.insert(u);
  }
  return static_cast<long>(ids.size());
}

bool is_kv(std::uint32_t what) {
  return what != kTraceTable;
}

// Accesses ordered by (block, warp, what, key), then thread: each run of equal keys is one warp
// load instruction.
std::vector<std::size_t> instruction_order(const TraceLaunch& l) {
  std::vector<std::size_t> idx(l.accesses.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  const auto key = [&](std::size_t i) {
    const TraceAccess& a = l.accesses[i];
    return std::make_tuple(a.block, a.thread / kWarpSize, a.what, a.key, a.thread, a.addr);
  };
  std::sort(idx.begin(), idx.end(), [&](std::size_t x, std::size_t y) { return key(x) < key(y); });
  return idx;
}

bool same_instruction(const TraceAccess& a, const TraceAccess& b) {
  return a.block == b.block && a.thread / kWarpSize == b.thread / kWarpSize && a.what == b.what &&
         a.key == b.key;
}

}  // namespace

Traffic& Traffic::operator+=(const Traffic& o) {
  loads += o.loads;
  bytes += o.bytes;
  distinct_bytes += o.distinct_bytes;
  sectors += o.sectors;
  ideal_sectors += o.ideal_sectors;
  lines += o.lines;
  ideal_lines += o.ideal_lines;
  return *this;
}

Traffic traffic_of(const std::vector<std::pair<std::uintptr_t, unsigned>>& ranges) {
  Traffic t;
  t.loads = 1;
  for (const auto& r : ranges) t.bytes += r.second;
  auto sorted = ranges;
  t.distinct_bytes = distinct_bytes(sorted);
  t.sectors = units_touched(ranges, kSector);
  t.lines = units_touched(ranges, kLine);
  t.ideal_sectors = ceil_div(t.distinct_bytes, static_cast<long>(kSector));
  t.ideal_lines = ceil_div(t.distinct_bytes, static_cast<long>(kLine));
  return t;
}

KernelTrace summarize_launch(const TraceLaunch& l) {
  KernelTrace k;
  k.kernel = l.kernel;
  k.grid = l.grid;
  k.block = l.block;
  const std::size_t n_blocks = static_cast<std::size_t>(l.grid.x) * l.grid.y * l.grid.z;
  k.blocks.resize(n_blocks);
  for (std::size_t b = 0; b < n_blocks; ++b) k.blocks[b].block = static_cast<std::uint32_t>(b);
  for (const TraceRole& r : l.roles)
    if (r.block < n_blocks) k.blocks[r.block].role = r;

  const std::vector<std::size_t> order = instruction_order(l);
  std::vector<std::pair<std::uintptr_t, unsigned>> ranges;
  for (std::size_t i = 0; i < order.size();) {
    const TraceAccess& first = l.accesses[order[i]];
    ranges.clear();
    std::size_t j = i;
    for (; j < order.size() && same_instruction(first, l.accesses[order[j]]); ++j) {
      const TraceAccess& a = l.accesses[order[j]];
      ranges.emplace_back(a.addr, a.bytes);
    }
    const Traffic t = traffic_of(ranges);
    ThreadBlockTrace& tb = k.blocks.at(first.block);
    (is_kv(first.what) ? tb.kv : tb.table) += t;
    k.by_what[first.what < kTraceWhatCount ? first.what : 0] += t;
    i = j;
  }

  std::vector<std::set<int>> tiles(n_blocks);
  std::vector<std::pair<std::uintptr_t, unsigned>> kv_ranges;
  for (const TraceAccess& a : l.accesses) {
    if (!is_kv(a.what)) continue;
    kv_ranges.emplace_back(a.addr, a.bytes);
    if (a.tile >= 0 && a.block < n_blocks) tiles[a.block].insert(a.tile);
  }
  k.kv_unique_bytes = distinct_bytes(kv_ranges);
  for (std::size_t b = 0; b < n_blocks; ++b) {
    ThreadBlockTrace& tb = k.blocks[b];
    std::set<int> left = tiles[b];
    if (tb.role) {
      for (int id : tb.role->table) {
        if (left.erase(id) != 0) tb.kv_blocks.push_back(id);
      }
    }
    tb.stray_blocks.assign(left.begin(), left.end());
    k.kv += tb.kv;
    k.table += tb.table;
  }
  return k;
}

std::vector<WarpLoad> warp_loads(const TraceLaunch& l, std::uint32_t block, std::size_t limit) {
  // Issue order: the position of each instruction's first record in the trace.
  using Id = std::tuple<std::uint32_t, std::uint32_t, std::uint64_t>;  // warp, what, key
  std::map<Id, std::size_t> first_seen;
  std::map<std::size_t, std::vector<const TraceAccess*>> by_first;
  for (std::size_t i = 0; i < l.accesses.size(); ++i) {
    const TraceAccess& a = l.accesses[i];
    if (a.block != block) continue;
    const Id id{a.thread / static_cast<std::uint32_t>(kWarpSize), a.what, a.key};
    const auto it = first_seen.emplace(id, i).first;
    by_first[it->second].push_back(&a);
  }
  std::vector<WarpLoad> out;
  for (auto& [pos, lanes] : by_first) {
    if (out.size() == limit) break;
    std::stable_sort(lanes.begin(), lanes.end(), [](const TraceAccess* x, const TraceAccess* y) {
      return x->thread < y->thread;
    });
    WarpLoad w;
    w.block = block;
    w.warp = lanes.front()->thread / kWarpSize;
    w.what = lanes.front()->what;
    w.key = lanes.front()->key;
    std::vector<std::pair<std::uintptr_t, unsigned>> ranges;
    for (const TraceAccess* a : lanes) {
      w.addrs.push_back(a->addr);
      w.lane_ids.push_back(static_cast<int>(a->thread % kWarpSize));
      w.bytes_per_lane = std::max(w.bytes_per_lane, a->bytes);
      ranges.emplace_back(a->addr, a->bytes);
    }
    w.lanes = static_cast<int>(lanes.size());
    w.traffic = traffic_of(ranges);
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace kvscope::sim

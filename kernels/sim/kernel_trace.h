// A recorded launch (memory_trace.h) summarized as a GPU would see its memory traffic: each
// thread block's role and the KV blocks it read, and every warp-wide load instruction's memory
// transactions against the fewest its bytes allow.
//
// A warp load instruction is the loads of one warp's lanes that share a TraceWhat and a key. It
// touches some 32-byte sectors (the unit of a transaction between L2 and the SMs on sm_80 and
// sm_90) and some 128-byte lines; the ideal for it is the fewest sectors (lines) that could hold
// the distinct bytes its lanes asked for, ceil(distinct / 32) (ceil(distinct / 128)): what a
// perfectly coalesced access of the same bytes would issue. Lanes that ask for the same bytes
// (a broadcast) count those bytes once.
//
// What the emulator's trace covers: the KV tiles' codes and scales, block table entries and KIVI
// staging rows, as the attention kernels load them (kernels/ops/paged_attention.cuh,
// decode_attention.cuh). Not recorded: queries, the live map, shared memory and the outputs.
// Caches are not modelled: a sector read twice is two transactions here (on a GPU the second may
// hit L1 or L2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/sim/memory_trace.h"

namespace kvscope::sim {

// Transactions of a set of loads: bytes asked for (each lane's own), distinct bytes, sectors and
// lines touched, and their ideals.
struct Traffic {
  long loads = 0;  // warp load instructions
  long bytes = 0;
  long distinct_bytes = 0;
  long sectors = 0, ideal_sectors = 0;
  long lines = 0, ideal_lines = 0;
  Traffic& operator+=(const Traffic& o);
  // The bytes the transactions move (32 a sector), and the share of them the lanes asked for
  // (Nsight Compute's load efficiency; 1 when nothing moved).
  long bytes_moved() const { return 32 * sectors; }
  double used_share() const {
    return sectors > 0 ? static_cast<double>(distinct_bytes) / static_cast<double>(bytes_moved())
                       : 1.0;
  }
};

// One warp load instruction.
struct WarpLoad {
  std::uint32_t block = 0, warp = 0, what = 0;
  std::uint64_t key = 0;
  int lanes = 0;                      // lanes that took part
  std::vector<std::uintptr_t> addrs;  // each lane's first byte, in lane order
  std::vector<int> lane_ids;
  unsigned bytes_per_lane = 0;  // the largest lane load
  Traffic traffic;              // loads = 1
};

struct ThreadBlockTrace {
  std::uint32_t block = 0;  // linear index in the grid
  std::optional<TraceRole> role;
  std::vector<int> kv_blocks;     // KV blocks read, in the order of the role's block table
  std::vector<int> stray_blocks;  // read but not in the role's table (a kernel bug; expect none)
  Traffic kv;                     // K and V codes, scales and staging rows
  Traffic table;                  // block table entries
};

struct KernelTrace {
  std::string kernel;
  dim3 grid, block;
  std::vector<ThreadBlockTrace> blocks;  // every block of the grid, in linear order
  Traffic kv, table;                     // the sums over the blocks
  Traffic by_what[kTraceWhatCount];
  long kv_unique_bytes = 0;  // distinct KV bytes over the whole launch (GQA: blocks share rows)
};

// The summary of a recorded launch (l.recorded must be true).
KernelTrace summarize_launch(const TraceLaunch& l);
// Block `block`'s warp load instructions, in the order the warp issued them (first lane's
// first record), at most `limit` of them.
std::vector<WarpLoad> warp_loads(const TraceLaunch& l, std::uint32_t block, std::size_t limit);

// Sectors and lines touched by byte ranges [addr, addr + bytes), and their distinct bytes.
Traffic traffic_of(const std::vector<std::pair<std::uintptr_t, unsigned>>& ranges);

}  // namespace kvscope::sim

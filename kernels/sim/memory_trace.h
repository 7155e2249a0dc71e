// The emulator's memory trace: which bytes of device memory each CUDA thread of a launch loads,
// recorded while the kernels run on the SIMT emulator (simt.h), so that a launch's access pattern
// can be drawn and its memory transactions counted (kernels/sim/kernel_trace.h).
//
// Kernels say what they load through simt::trace_load (kernels/common/simt_api.cuh; nothing at all
// on the GPU), naming what the bytes are (TraceWhat), the physical KV block they belong to and a
// key that identifies the dynamic load instruction within the block: the lanes of one warp that
// record the same (what, key) issued one warp-wide load together, as lanes of a warp do on a GPU
// (a lane that skipped it, e.g. past the end of its range or on an evicted slot, was inactive).
// Keys come from the kernel's loop counters (simt::trace_key), not from the order of calls, so
// that divergent lanes still line up.
//
// Recording only observes: the loads themselves are the kernel's own, and a launch computes the
// same results with and without a recorder (tests/kernels/kernel_trace_test.cpp checks it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/sim/simt.h"

namespace kvscope::sim {

// What a traced load reads.
enum TraceWhat : unsigned {
  kTraceKCodes = 0,   // a K tile's values (codes)
  kTraceKScales = 1,  // a K tile's per-token scales, or per-group scales and zeros
  kTraceVCodes = 2,
  kTraceVScales = 3,
  kTraceTable = 4,    // a block table entry
  kTraceStaging = 5,  // a KIVI open group's full-precision row
  kTraceWhatCount = 6
};
const char* trace_what_name(unsigned what);

// One thread's load: `bytes` bytes at `addr`, of physical block `tile` (-1: not a KV tile).
struct TraceAccess {
  std::uint32_t block = 0;   // the thread block, linear (x + y * grid.x + ...)
  std::uint32_t thread = 0;  // the thread within it, linear; its warp is thread / 32
  std::uint32_t what = 0;
  std::int32_t tile = -1;
  std::uint64_t key = 0;
  std::uintptr_t addr = 0;
  std::uint32_t bytes = 0;
};

// What a thread block of an attention launch works on, as the kernel declares it
// (simt::trace_role): query `query` of the launch, KV head `kv_head`, split `split` of the
// query's slots (slots [slot_begin, slot_end)), query heads [head_first, head_first + heads), and
// the query's block table as the kernel was given it (its first ceil(num_slots / block_size)
// entries).
struct TraceRole {
  std::uint32_t block = 0;
  int query = 0, kv_head = 0, split = 0, head_first = 0, heads = 0;
  int slot_begin = 0, slot_end = 0, num_slots = 0, block_size = 0;
  std::vector<int> table;
  // A KV write's thread block (simt::trace_write_role): the row it writes, 0 K or 1 V, of slot
  // slot_begin (its KV head kv_head; -1 for the whole row); -1 for an attention block.
  int row = -1;
};

struct TraceLaunch {
  std::string kernel;
  dim3 grid, block;
  bool recorded = false;  // whether its loads were recorded (the recorder's filter)
  std::vector<TraceAccess> accesses;
  std::vector<TraceRole> roles;
};

// Collects the launches its thread makes while it is installed. `select` (empty: every launch)
// decides from the kernel's name and the launch's index among those seen so far whether a launch's
// loads and roles are recorded; every launch is listed.
class TraceRecorder {
 public:
  std::function<bool(const std::string& kernel, int index)> select;
  std::vector<TraceLaunch> launches;
  // At most this many loads are kept over all launches (48 bytes each: 8 M is 384 MB); past it
  // the rest are dropped and `overflowed` says so.
  std::size_t max_accesses = std::size_t{8} << 20;
  bool overflowed = false;

  // Internal: the emulator's calls.
  void begin_launch(const LaunchConfig& config);
  void access(const TraceAccess& a);
  void role(TraceRole r);

 private:
  std::size_t total_accesses_ = 0;
};

// Installs `r` for the launches the calling thread makes from now on (nullptr: none); launches
// made by other threads (another run's worker, with a recorder of its own or none) are neither
// listed nor recorded. Recording needs the emulator's fiber mode (the default): in thread
// mode the CUDA threads are other OS threads, and their loads are not recorded.
void install_recorder(TraceRecorder* r);
// Installs a recorder for its lifetime.
class ScopedRecorder {
 public:
  explicit ScopedRecorder(TraceRecorder& r) { install_recorder(&r); }
  ~ScopedRecorder() { install_recorder(nullptr); }
  ScopedRecorder(const ScopedRecorder&) = delete;
  ScopedRecorder& operator=(const ScopedRecorder&) = delete;
};

// The emulator's side (simt.cpp and simt_api.cuh): whether a recorder is installed, the launch
// about to run, and a kernel's loads and roles (ignored when nothing records).
bool recording();
void trace_launch(const LaunchConfig& config);
void trace_access(const void* p, unsigned bytes, unsigned what, int tile, std::uint64_t key);
void trace_role(int query, int kv_head, int split, int head_first, int heads, int slot_begin,
                int slot_end, const int* table, int num_slots, int block_size);
void trace_write_role(int row, int kv_head, int slot, const int* table, int block_size);

}  // namespace kvscope::sim

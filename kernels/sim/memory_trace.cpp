// See memory_trace.h.
#include "kernels/sim/memory_trace.h"

#include <utility>

namespace kvscope::sim {
namespace {

// The recorder the calling thread installed (nullptr: none), and whether the launch this thread
// runs is recorded: set by trace_launch on the launching thread, whose fibers run the launch's
// CUDA threads. Thread-local: another thread's launches never reach this recorder.
thread_local TraceRecorder* t_recorder = nullptr;
thread_local bool t_selected = false;

std::uint32_t linear_block() {
  const dim3& b = block_idx();
  const dim3& g = grid_dim();
  return b.x + g.x * (b.y + g.y * b.z);
}
std::uint32_t linear_thread() {
  const dim3& t = thread_idx();
  const dim3& d = block_dim();
  return t.x + d.x * (t.y + d.y * t.z);
}

}  // namespace

const char* trace_what_name(unsigned what) {
  switch (what) {
    case kTraceKCodes:
      return "k";
    case kTraceKScales:
      return "k_scales";
    case kTraceVCodes:
      return "v";
    case kTraceVScales:
      return "v_scales";
    case kTraceTable:
      return "block_table";
    case kTraceStaging:
      return "staging";
    default:
      return "?";
  }
}

void TraceRecorder::begin_launch(const LaunchConfig& config) {
  TraceLaunch l;
  l.kernel = config.kernel;
  l.grid = config.grid;
  l.block = config.block;
  l.recorded = !select || select(l.kernel, static_cast<int>(launches.size()));
  t_selected = l.recorded;
  launches.push_back(std::move(l));
}

void TraceRecorder::access(const TraceAccess& a) {
  if (total_accesses_ >= max_accesses) {
    overflowed = true;
    return;
  }
  ++total_accesses_;
  launches.back().accesses.push_back(a);
}

void TraceRecorder::role(TraceRole r) {
  launches.back().roles.push_back(std::move(r));
}

void install_recorder(TraceRecorder* r) {
  t_selected = false;
  t_recorder = r;
}

bool recording() {
  return t_selected;
}

void trace_launch(const LaunchConfig& config) {
  t_selected = false;
  if (t_recorder != nullptr) t_recorder->begin_launch(config);
}

void trace_access(const void* p, unsigned bytes, unsigned what, int tile, std::uint64_t key) {
  if (!recording()) return;
  TraceAccess a;
  a.block = linear_block();
  a.thread = linear_thread();
  a.what = what;
  a.tile = tile;
  a.key = key;
  a.addr = reinterpret_cast<std::uintptr_t>(p);
  a.bytes = bytes;
  t_recorder->access(a);
}

void trace_role(int query, int kv_head, int split, int head_first, int heads, int slot_begin,
                int slot_end, const int* table, int num_slots, int block_size) {
  if (!recording()) return;
  TraceRole r;
  r.block = linear_block();
  r.query = query;
  r.kv_head = kv_head;
  r.split = split;
  r.head_first = head_first;
  r.heads = heads;
  r.slot_begin = slot_begin;
  r.slot_end = slot_end;
  r.num_slots = num_slots;
  r.block_size = block_size;
  const int entries = block_size > 0 ? (num_slots + block_size - 1) / block_size : 0;
  r.table.assign(table, table + entries);
  t_recorder->role(std::move(r));
}

void trace_write_role(int row, int kv_head, int slot, const int* table, int block_size) {
  if (!recording()) return;
  TraceRole r;
  r.block = linear_block();
  r.kv_head = kv_head;
  r.slot_begin = slot;
  r.slot_end = slot + 1;
  r.num_slots = slot + 1;
  r.block_size = block_size;
  r.row = row;
  const int entries = block_size > 0 ? slot / block_size + 1 : 0;
  r.table.assign(table, table + entries);
  t_recorder->role(std::move(r));
}

}  // namespace kvscope::sim

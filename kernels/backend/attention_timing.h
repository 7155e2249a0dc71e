// One engine step's attention launch timed on the device (issue #45). The Kernel panel draws a
// launch as the SIMT emulator ran it, with the bytes it read; this is what the same launch costs
// on a real GPU.
//
// `kvscope trace kernel --measure` runs a scenario on --backend cuda with an AttentionTiming
// installed. At the chosen layer the CUDA backend issues the step's attention launch again,
// `repeats` times back to back between two events, for `rounds` rounds (the launch reads the
// step's queries and the pool and writes only its outputs and scratch, so each repeat rewrites
// the same values), and times a device-to-device copy once for scale. kernel_timing.json keeps
// each step's median and fastest round beside the launch's shape (LaunchShape). The GPU check
// measures scenarios/kernel-coalescing.json's launches so, and the Kernel panel states the
// figure for a launch of the same shape (assets/gpu/kernel-timings.json, docs/gpu-results.md).
//
// Only the one-launch batch path is timed (every prefill chunk and decode step whose contexts
// fit 4,096 slots: what the emulator's trace covers too); a step that took one launch per query
// is reported as such, untimed.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace kvscope {

// What a measurement is matched on: the formats, the block size, the heads, and each query's
// context (slots attended, in the launch's query order).
struct LaunchShape {
  std::string k_format, v_format;
  int block_size = 0, n_heads = 0, kv_heads = 0, head_dim = 0;
  std::vector<int> contexts;
  bool operator==(const LaunchShape&) const = default;
};

struct AttentionTiming {
  // Asked for: the layer whose launch is timed, the rounds of back-to-back launches, and the
  // bytes of the copy timed beside it (0: none).
  int layer = 0;
  int repeats = 20;
  int rounds = 7;
  long copy_bytes = 256L << 20;

  // Filled by the CUDA backend at that layer's attention in the step.
  bool timed = false;
  bool per_query = false;  // the step took one launch per query: not timed
  LaunchShape shape;
  long kv_slots = 0;             // distinct (block, offset) slots the launch reads
  long kv_bytes = 0;             // their K and V bytes in the pool's formats, scales included
  std::vector<double> round_ms;  // per launch, each round (the round's time / repeats)
  double copy_gb_per_s = 0.0;    // the copy's bytes read per second (filled once)
};

// Installs `t` for the attention launches the calling thread's CUDA backend makes from now on
// (nullptr: none).
void install_attention_timing(AttentionTiming* t);
AttentionTiming* attention_timing();

class ScopedAttentionTiming {
 public:
  explicit ScopedAttentionTiming(AttentionTiming& t) { install_attention_timing(&t); }
  ~ScopedAttentionTiming() { install_attention_timing(nullptr); }
  ScopedAttentionTiming(const ScopedAttentionTiming&) = delete;
  ScopedAttentionTiming& operator=(const ScopedAttentionTiming&) = delete;
};

// One timed launch as kernel_timing.json keeps it.
struct MeasuredLaunch {
  LaunchShape shape;
  int step = 0, layer = 0;
  long kv_bytes = 0;
  double ms = 0.0;      // the median round's time per launch
  double ms_min = 0.0;  // the fastest round's
  int repeats = 0, rounds = 0;
  double kv_gb_per_s() const { return ms > 0.0 ? static_cast<double>(kv_bytes) / ms / 1e6 : 0.0; }
};

// A file of them: where and when they were measured.
struct KernelTimings {
  std::string device;  // the GPU's name; "SIMT emulator" for an emulated run
  bool emulated = false;
  std::string date, commit, scenario;
  double copy_gb_per_s = 0.0;
  std::vector<MeasuredLaunch> launches;

  // The launch of exactly this shape (the last measured), or nullptr.
  const MeasuredLaunch* find(const LaunchShape& s) const;
  // Adds `m`, replacing a launch of the same shape.
  void add(MeasuredLaunch m);
};

// The median and fastest of a timing's rounds as a MeasuredLaunch (t.timed must be true).
MeasuredLaunch measured_launch(const AttentionTiming& t, int step);

nlohmann::json kernel_timings_json(const KernelTimings& t);
// kernel_timings_json laid out one launch a line (a GPU check's file holds thousands).
void write_kernel_timings(std::ostream& o, const KernelTimings& t);
// Throws kvscope::Error naming `where` and the field for a file not in this format.
KernelTimings parse_kernel_timings(const nlohmann::json& j, const std::string& where);
KernelTimings load_kernel_timings(const std::string& path);

}  // namespace kvscope

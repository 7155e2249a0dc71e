// The memory wall for a model shape: how much context (one sequence) or batch (sequences of a
// given length) fits in the KV cache beside the weights on 1..G GPUs, as a table and a PNG.
// Shared by `kvscope memwall` and the run report of random-weight (published shape) models.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/analysis/memory_math.h"
#include "engine/common/config.h"
#include "engine/common/interconnect.h"
#include "engine/kv/kv_format.h"

namespace kvscope {

struct MemoryWallSpec {
  std::string model_name;  // "synthetic:llama-3-70b"
  ModelConfig shape;
  std::int64_t params = 0;  // parameters counted as weights (shape.num_params() by default)
  double weight_bytes_per_param = 2;  // fp16 weights
  std::string weight_dtype = "fp16";
  KvFormat kv_format;       // the KV format of the table
  int block_size = 16;      // for the exact bytes of formats with scales
  double gpu_bytes = 80e9;  // per GPU
  int min_gpus = 1;
  int max_gpus = 8;
  std::int64_t context = 0;  // tokens per sequence for the batch column
  int ring_devices = 0;      // > 0: one `context`-token sequence split over a ring of this many
  // The ring's timing: each device's attention FLOPS (default an H100 SXM's dense bf16) and the
  // link between neighbours (default NVLink 4).
  double ring_flops = 989e12;
  Link ring_link = link_presets()[1];
};

struct MemoryWall {
  double kv_bytes_per_token = 0;          // exact, scales included
  double kv_payload_bytes_per_token = 0;  // the formula, scales excluded
  double weight_bytes = 0;
  std::vector<MemoryWallRow> rows;
  std::optional<RingSplit> ring;          // with spec.ring_devices
  std::optional<RingTiming> ring_timing;  // with spec.ring_devices
};
// Throws kvscope::Error on bad inputs (see memory_wall and KvFormat::validate).
MemoryWall compute_memory_wall(const MemoryWallSpec& spec);

// Plain-text lines for the terminal (formula, weights, the table, and the ring's split when the
// spec asks for one), each ending in '\n'.
std::string memory_wall_text(const MemoryWallSpec& spec, const MemoryWall& wall);
// The same as a markdown section body (no heading).
std::string memory_wall_markdown(const MemoryWallSpec& spec, const MemoryWall& wall);
// PNG: max tokens vs GPUs for the spec's format and for fp16, int8 and int4 beside it; written
// atomically, throws kvscope::Error naming the path.
void write_memory_wall_png(const MemoryWallSpec& spec, const std::string& path,
                           const std::string& footnote);

}  // namespace kvscope

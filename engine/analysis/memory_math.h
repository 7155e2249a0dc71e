// KV memory arithmetic anyone can check by hand: bytes per token for a shape and format, bytes at
// N tokens, block rounding, and the context or batch that fits beside the weights on G GPUs.
// Byte sizes are printed with both units, since GB (10^9) and GiB (2^30) differ by 7.4%.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/common/config.h"
#include "engine/common/format_count.h"  // format_count, beside format_bytes
#include "engine/kv/kv_format.h"

namespace kvscope {

inline constexpr double kBytesPerGB = 1e9;                        // decimal gigabyte
inline constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;  // binary gibibyte, 2^30

// Payload bytes of one element in `dtype` (fp32 4, fp16/bf16 2, fp8/int8 1, int4 0.5, int2 and
// KIVI-2 0.25), scales excluded.
double payload_bytes_per_element(KvDtype dtype);

// The textbook formula: 2 (K and V) x layers x kv_heads x head_dim x bytes_per_element.
double kv_bytes_per_token(const ModelConfig& shape, double bytes_per_element);
// Exact bytes per token as kvscope's pool stores them in `block_size`-token blocks: the payload
// plus every per-token and per-tile scale of the K and V formats (equals the formula for fp32,
// fp16 and bf16).
double kv_bytes_per_token_exact(const ModelConfig& shape, int block_size, const KvFormat& k_format,
                                const KvFormat& v_format);
// MLA shapes: layers x (latent rank + RoPE key width) x bytes_per_element; 0 for non-MLA shapes.
double mla_bytes_per_token(const ModelConfig& shape, double bytes_per_element);

// Bytes for `tokens` tokens at `bytes_per_token`.
inline double kv_bytes_at(double bytes_per_token, std::int64_t tokens) {
  return bytes_per_token * static_cast<double>(tokens);
}

// How `tokens` tokens land in `block_size`-token blocks (paged allocation, one sequence).
struct BlockFit {
  std::int64_t blocks = 0;        // ceil(tokens / block_size)
  std::int64_t slots = 0;         // blocks x block_size
  std::int64_t wasted_slots = 0;  // empty slots in the last block (< block_size)
  double utilization = 1.0;       // tokens / slots (1 when no slots)
};
// Throws kvscope::Error when tokens < 0 or block_size < 1.
BlockFit paged_block_fit(std::int64_t tokens, int block_size);

// Parameters the shape holds (ModelConfig::num_params: llama2.c layout, a tied classifier counted
// once) times bytes per parameter.
double weight_bytes(const ModelConfig& shape, double bytes_per_param);

// What fits beside the weights on `gpus` GPUs of `gpu_bytes` each (weights split evenly, nothing
// else counted: activations, CUDA context and allocator slack are extra in real servers).
struct MemoryWallRow {
  int gpus = 0;
  double total_bytes = 0;  // gpus x gpu_bytes
  double weight_bytes = 0;
  double kv_budget_bytes = 0;  // total - weights; negative when the weights do not fit
  bool weights_fit = false;
  std::int64_t max_tokens = 0;  // floor(budget / bytes per token): one sequence's context
  std::int64_t max_batch = 0;   // floor(max_tokens / context): sequences of `context`
};
// One row per GPU count in [min_gpus, max_gpus]. Throws kvscope::Error on non-positive inputs.
std::vector<MemoryWallRow> memory_wall(double weight_bytes, double kv_bytes_per_token,
                                       double gpu_bytes, int min_gpus, int max_gpus,
                                       std::int64_t context);

// Ring attention (sequence parallelism; Liu, Zaharia and Abbeel, "Ring Attention with Blockwise
// Transformers", 2023): one sequence cut into `devices` contiguous chunks, one per device, each
// keeping its chunk's K and V. At every layer each device attends its own queries to every chunk
// in turn while the chunks travel round the ring: devices - 1 steps, each passing one chunk's K
// and V of that layer on to the next device.
struct RingSplit {
  int devices = 1;
  std::int64_t tokens = 0;
  std::int64_t chunk_tokens = 0;  // ceil(tokens / devices): the largest device's share
  double total_bytes = 0;         // tokens x bytes per token: the sequence's whole cache
  double device_bytes = 0;        // chunk_tokens x bytes per token: what one device keeps
  double step_bytes = 0;          // chunk_tokens x bytes per token / layers: one chunk, one layer
  int steps_per_layer = 0;        // devices - 1 hops before every chunk has visited every device
  double sent_per_device = 0;     // per pass over all layers: steps x layers x step bytes
  // While a device computes on the chunk visiting it the next one arrives: two chunks of one
  // layer in flight when the transfer overlaps the compute, as the paper's schedule does.
  double buffer_bytes = 0;  // 2 x step bytes (0 on one device: nothing travels)
};
// Throws kvscope::Error unless bytes_per_token > 0, layers >= 1, tokens >= 1 and
// 1 <= devices <= min(tokens, 4096) (every device holds at least one token).
RingSplit ring_split(double bytes_per_token, int layers, std::int64_t tokens, int devices);

// The ring's time at one layer, as the paper prices it: at each step a device attends the `c`
// queries of its chunk to the `c` keys of the chunk visiting it (4 x c^2 x heads x head_dim
// FLOPs: the scores and the value sum; the causal mask's savings are not counted) while the
// next chunk crosses the link (the step's bytes / its one-way bandwidth). The transfer hides
// behind the compute when the compute takes at least as long, which holds for chunks of at
// least min_chunk_tokens = F x (K/V bytes of one token at one layer) / (4 x heads x head_dim x B):
// the paper's c >= F / B for multi-head attention in bf16 (4 x heads x head_dim bytes a token);
// grouped-query attention and a narrower KV format pass fewer bytes, so smaller chunks hide it.
struct RingTiming {
  double flops_per_second = 0.0;
  double link_bytes_per_second = 0.0;
  double step_flops = 0.0;        // one device, one step, one layer
  double compute_seconds = 0.0;   // step_flops / F
  double transfer_seconds = 0.0;  // the step's bytes / B (0 on one device)
  // Per layer: every device attends its own chunk, then devices - 1 visiting ones, each while
  // the next arrives; what a transfer takes beyond its step's compute is exposed.
  double exposed_seconds = 0.0;       // per layer: (devices - 1) x max(0, transfer - compute)
  double layer_seconds = 0.0;         // devices x compute + exposed
  double layer_seconds_serial = 0.0;  // devices x compute + (devices - 1) x transfer
  double min_chunk_tokens = 0.0;      // the smallest chunk whose compute hides its transfer
  bool hidden() const { return exposed_seconds == 0.0; }
};
// Throws kvscope::Error unless heads, head_dim, flops and bandwidth are positive.
RingTiming ring_timing(const RingSplit& ring, int heads, int head_dim, double flops_per_second,
                       double link_bytes_per_second);

// "40.00 GiB = 42.95 GB", "320.00 KiB = 327.68 KB", "512 B": binary units with the decimal figure
// beside them (below 1 KiB: plain bytes).
std::string format_bytes(double bytes);
// "1.234 ms": a duration in seconds as milliseconds with three decimals.
std::string format_ms(double seconds);
// "12.3 us", "4.56 ms", "7.89 s": a duration with the unit that keeps it readable.
std::string format_time(double seconds);
// Parses a byte size with an explicit unit: "80GB" / "80 GB" (x10^9), "80GiB" (x2^30), also KB,
// MB, TB, KiB, MiB, TiB and plain "B"; a bare number is refused (the unit must be said). Throws
// kvscope::Error naming `where`.
double parse_byte_size(const std::string& text, const std::string& where);

}  // namespace kvscope

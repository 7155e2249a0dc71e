// KV memory arithmetic for published model shapes (UI-free; could move to engine/analysis):
// bytes per token = 2 x layers x kv_heads x head_dim x bytes, or layers x latent x bytes for MLA;
// and the architectures that bound or drop the cache: a sliding window (the cache stops growing at
// the window), an SSM (a constant state per layer, no KV cache) and a hybrid (a KV cache in its
// few attention layers, a constant state in the others).
#pragma once

#include <string>
#include <vector>

namespace kvscope::ui {

// SSM states are kept in 16 bits whatever the KV format (mamba_ssm and Hugging Face allocate them
// in the model's dtype; nobody quantizes them like a KV cache).
inline constexpr double kStateBytesPerValue = 2.0;

struct KvShape {
  std::string name;    // "Llama-3-70B"
  std::string preset;  // synthetic preset with this shape ("llama-3-70b"); "" when none runs it
  std::string source;  // where the shape's figures come from, when not from a preset
  int layers = 0;      // layers that cache K/V (a hybrid's attention layers only)
  int heads = 0;       // query heads (a ring's attention FLOPs), from the preset; 0 when none
  int kv_heads = 0;
  int head_dim = 0;
  int mla_latent = 0;  // MLA: cached values per layer per token (latent + RoPE key), 0 = none
  int window = 0;      // sliding-window attention: tokens each layer keeps, 0 = all of them
  double state_values = 0.0;  // values per sequence that do not grow with context (SSM states)

  // KV bytes each token adds while the cache grows (0 for a pure SSM).
  double bytes_per_token(double bytes_per_element) const;
  // One sequence's cache at `tokens` tokens: the growing part (up to the window) plus the state.
  double bytes_at(double tokens, double bytes_per_element) const;
  double state_bytes() const { return state_values * kStateBytesPerValue; }
  std::string dims() const;  // "2 x 80 x 8 x 128", "61 x 576 (latent)", "64 x 5120 x (16 + 4)"
};

// The hybrid shape (Jamba) laid out as vLLM's hybrid KV cache manager does, by kvscope's own
// allocator (engine/kv/layer_groups.h, KvCacheManager with layer groups, bookkeeping): one
// sequence of each `contexts` tokens, its blocks x the block's bytes, in fp16. The attention block
// grows to 80 tokens for the 311,296-byte Mamba state (vLLM's sizing: conv (d_conv - 1) x d_inner
// + scan d_inner x d_state, bf16), whose page is padded to 327,680 bytes.
struct AllocatorPoint {
  double tokens = 0.0;
  double bytes = 0.0;
};
std::vector<AllocatorPoint> hybrid_allocator_points(const std::vector<double>& contexts);

struct KvFormatBytes {
  const char* name;  // "fp16"
  double bytes;      // per element, scales excluded
};

// Llama-3-70B, Llama-3-8B, Mistral-7B and DeepSeek-V3 (MLA), from the synthetic presets; then
// Mistral-7B with its 4,096-token sliding window, Mamba-2.8B (SSM) and Jamba (one attention layer
// in eight), from their published configurations.
std::vector<KvShape> published_kv_shapes();
// fp16 (2 bytes), fp8/int8 (1), int4 (0.5).
const std::vector<KvFormatBytes>& kv_format_bytes();

// Largest context (tokens) of one sequence whose cache fits `memory_bytes`: infinity when the
// cache stops growing (a window, an SSM) below it, 0 when not even its state fits.
double max_context_tokens(double memory_bytes, const KvShape& shape, double bytes_per_element);

}  // namespace kvscope::ui

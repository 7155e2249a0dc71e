// KV memory arithmetic for published model shapes (UI-free; could move to engine/analysis):
// bytes per token = 2 x layers x kv_heads x head_dim x bytes, or layers x latent x bytes for MLA.
#pragma once

#include <string>
#include <vector>

namespace kvscope::ui {

struct KvShape {
  std::string name;    // "Llama-3-70B"
  std::string preset;  // synthetic preset with this shape ("llama-3-70b")
  int layers = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int mla_latent = 0;  // MLA: cached values per layer per token (latent + RoPE key), 0 = none
  double bytes_per_token(double bytes_per_element) const;
  std::string dims() const;  // "80 x 8 x 128" or "61 x (512 + 64)"
};

struct KvFormatBytes {
  const char* name;  // "fp16"
  double bytes;      // per element, scales excluded
};

// Llama-3-70B, Llama-3-8B, Mistral-7B and DeepSeek-V3 (MLA), from the synthetic presets.
std::vector<KvShape> published_kv_shapes();
// fp16 (2 bytes), fp8/int8 (1), int4 (0.5).
const std::vector<KvFormatBytes>& kv_format_bytes();

// Largest context (tokens) whose KV cache fits `memory_bytes` at `bytes_per_token`.
double max_context_tokens(double memory_bytes, double bytes_per_token);

}  // namespace kvscope::ui

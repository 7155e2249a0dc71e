// ModelConfig: the shape of a Llama-architecture model, plus the KV arithmetic derived from it.
#pragma once

#include <cstdint>
#include <string>

namespace kvscope {

struct ModelConfig {
  int dim = 0;         // transformer width
  int hidden_dim = 0;  // FFN inner width
  int n_layers = 0;
  int n_heads = 0;     // query heads
  int n_kv_heads = 0;  // key/value heads (GQA when < n_heads)
  int vocab_size = 0;
  int seq_len = 0;                // trained context length
  bool shared_classifier = true;  // classifier == token embedding
  float rope_theta = 10000.0f;
  float rms_eps = 1e-5f;  // RMSNorm epsilon (llama2.c hard-codes 1e-5; GGUF files state theirs)
  // Synthetic shapes only: a head size other than dim / n_heads (llama2.c files cannot hold one).
  int head_dim_override = 0;
  // Synthetic MLA shapes only (DeepSeek-V3): latent rank and decoupled RoPE key width; 0 = none.
  int mla_kv_lora_rank = 0;
  int mla_rope_dim = 0;

  int head_dim() const { return head_dim_override > 0 ? head_dim_override : dim / n_heads; }
  int q_dim() const { return n_heads * head_dim(); }
  int kv_dim() const { return n_kv_heads * head_dim(); }
  int gqa_group() const { return n_heads / n_kv_heads; }

  // Number of float parameters the llama2.c layout stores (excluding freq_cis tables).
  std::int64_t num_params() const;
  // KV bytes per token for all layers: 2 (K and V) * layers * kv_heads * head_dim * bytes.
  std::int64_t kv_bytes_per_token(double bytes_per_element) const {
    return static_cast<std::int64_t>(2.0 * n_layers * n_kv_heads * head_dim() * bytes_per_element);
  }
  std::string describe() const;
};

}  // namespace kvscope

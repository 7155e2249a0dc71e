// CPU ops of the MLA latent cache (engine/mla/mla_codec.h). cpu::kv_write and
// cpu::paged_attention hand a view with an MlaCodec to these, so the forward pass is unchanged.
#pragma once

#include <vector>

#include "engine/backend/backend.h"

namespace kvscope::cpu {

// Undoes RoPE on k[kv_dim] at the write slot's position, forms the latent c = u_t [k; v] (mode B:
// the nope dims of k only) and stores it; mode B also stores the rotary dims of k as they came.
// Throws kvscope::Error when the view's storage is not a latent cache of the codec's shape.
void mla_kv_write(const KvSeqView& view, int layer, const float* k, const float* v);

// Attention over a latent cache: mode A rebuilds every slot's K (then RoPE at its position) and V;
// mode B absorbs W_uk into the query and W_uv into the output and attends over latents.
void mla_attention(const KvSeqView& view, int layer, const AttentionShape& shape, const float* q,
                   float* out, int query_pos, AttentionObserver* observer,
                   std::vector<float>& scratch);

// The absorbed kernel on its own (mode B; also timed at DeepSeek-V3 shape by `kvscope bench mla`).
struct LatentAttentionShape {
  int n_heads = 0;
  int rank = 0;        // latent values per token (the view's K region)
  int rope_heads = 0;  // RoPE keys per token (V region); query head h uses h * rope_heads / n_heads
  int rope_dim = 0;    // values per RoPE key
  float score_divisor = 1.0f;  // scores are divided by this (sqrt of the query-key head size)
};
// For each query head h over the view's live slots:
//   s_t = (q_lat[h] . c_t + q_rope[h] . k_rope_t) / score_divisor,  ctx[h] = sum_t softmax(s)_t c_t
// q_lat [n_heads][rank], q_rope [n_heads][rope_dim], ctx [n_heads][rank]. `scratch` grows; it
// holds the attention weights [n_heads][num_slots] at its front afterwards.
void mla_latent_attention(const KvSeqView& view, int layer, const LatentAttentionShape& shape,
                          const float* q_lat, const float* q_rope, float* ctx,
                          std::vector<float>& scratch);

}  // namespace kvscope::cpu

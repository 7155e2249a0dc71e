// Published KV shapes: the dense, GQA and MLA ones read from the engine's synthetic presets so the
// two never disagree; the window, SSM and hybrid ones from their published configurations.
#include "app/core/memory_shapes.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/kv/cache_manager.h"
#include "engine/kv/layer_groups.h"
#include "engine/model/synthetic.h"

namespace kvscope::ui {

double KvShape::bytes_per_token(double bytes_per_element) const {
  if (mla_latent > 0) return static_cast<double>(layers) * mla_latent * bytes_per_element;
  return 2.0 * layers * kv_heads * head_dim * bytes_per_element;
}

double KvShape::bytes_at(double tokens, double bytes_per_element) const {
  const double kept = window > 0 ? std::min(tokens, static_cast<double>(window)) : tokens;
  return kept * bytes_per_token(bytes_per_element) + state_bytes();
}

std::string KvShape::dims() const {
  if (mla_latent > 0)
    return std::to_string(layers) + " x " + std::to_string(mla_latent) + " (latent)";
  std::string kv = layers > 0 ? "2 x " + std::to_string(layers) + " x " + std::to_string(kv_heads) +
                                    " x " + std::to_string(head_dim)
                              : "no KV";
  if (window > 0) kv += " (last " + std::to_string(window) + " tokens)";
  if (state_values > 0)
    kv += " + " + std::to_string(static_cast<long long>(state_values)) + " state values";
  return kv;
}

std::vector<KvShape> published_kv_shapes() {
  const struct {
    const char* name;
    const char* preset;
  } kShapes[] = {{"Llama-3-70B", "llama-3-70b"},
                 {"Llama-3-8B", "llama-3-8b"},
                 {"Mistral-7B", "mistral-7b"},
                 {"DeepSeek-V3 (MLA)", "deepseek-v3-mla-dims"}};
  std::vector<KvShape> shapes;
  for (const auto& s : kShapes) {
    const ModelConfig c = parse_synthetic_spec(s.preset).config;
    KvShape k;
    k.name = s.name;
    k.preset = s.preset;
    k.layers = c.n_layers;
    k.heads = c.n_heads;
    k.kv_heads = c.n_kv_heads;
    k.head_dim = c.head_dim();
    if (c.mla_kv_lora_rank > 0) k.mla_latent = c.mla_kv_lora_rank + c.mla_rope_dim;
    shapes.push_back(k);
  }
  // Mistral-7B as released (v0.1): every layer attends over the last 4,096 tokens only, so a
  // rolling buffer of 4,096 slots per layer is the whole cache.
  KvShape swa = shapes[2];
  swa.name = "Mistral-7B (window 4K)";
  swa.source = "Mistral 7B paper: sliding window 4,096";
  swa.window = 4096;
  shapes.push_back(swa);
  // An SSM keeps per layer a convolution state [d_inner][d_conv] and a scan state
  // [d_inner][d_state], whatever the context: Mamba-2.8B has 64 layers, d_model 2,560 (d_inner
  // 5,120), d_state 16, d_conv 4.
  KvShape ssm;
  ssm.name = "Mamba-2.8B (SSM)";
  ssm.source = "state-spaces/mamba-2.8b: 64 layers, d_inner 5,120, d_state 16, d_conv 4";
  ssm.state_values = 64.0 * 5120.0 * (16.0 + 4.0);
  shapes.push_back(ssm);
  // Jamba v0.1: 32 layers, one attention layer in eight (4 of them, GQA with 8 KV heads of 128),
  // the other 28 Mamba layers with d_inner 8,192 (d_model 4,096 x 2), d_state 16, d_conv 4. The
  // paper's Table 1 gives its KV cache at 256K tokens in 16 bits as 4 GB; 4 layers x 16 KiB per
  // token is 4 GiB.
  KvShape hybrid;
  hybrid.name = "Jamba (1 attn layer in 8)";
  hybrid.source = "Jamba v0.1 (arXiv 2403.19887): 4 attention + 28 Mamba layers";
  hybrid.layers = 4;
  hybrid.kv_heads = 8;
  hybrid.head_dim = 128;
  hybrid.state_values = 28.0 * 8192.0 * (16.0 + 4.0);
  shapes.push_back(hybrid);
  return shapes;
}

std::vector<AllocatorPoint> hybrid_allocator_points(const std::vector<double>& contexts) {
  // Jamba v0.1: 4 attention layers of 8 KV heads of 128, 28 Mamba layers (d_inner 8,192,
  // d_state 16, d_conv 4); fp16 K/V: 2 x 8 x 128 x 2 = 4,096 bytes a token a layer.
  constexpr long kAttentionBytes = 2L * 8 * 128 * 2;
  constexpr long kStateBytes = (3L * 8192 + 8192L * 16) * 2;
  const LayerGroupPlan plan =
      plan_layer_groups({{LayerKind::kFull, 4, 0, 0}, {LayerKind::kState, 28, 0, kStateBytes}},
                        kAttentionBytes, 16, "hybrid_allocator_points");
  double most = 0.0;
  for (double t : contexts) most = std::max(most, t);
  KvLayout layout;
  layout.n_layers = plan.group_size;
  layout.kv_heads = 8;
  layout.head_dim = 128;
  layout.block_size = plan.block_size;
  layout.num_blocks = static_cast<int>(std::ceil(most / plan.block_size)) +
                      static_cast<int>(plan.groups.size()) + 1;
  layout.k_format = layout.v_format = parse_kv_format("fp16", "hybrid_allocator_points");
  std::vector<AllocatorPoint> out;
  for (double t : contexts) {
    KvCacheManager cache(layout, AllocatorKind::kPaged, 0, /*with_storage=*/false);
    cache.set_layer_groups(plan.groups);
    cache.require_add_sequence(SeqId(0));
    cache.require_append_slots(SeqId(0), static_cast<int>(t));
    out.push_back({t, static_cast<double>(cache.pool().num_used()) *
                          static_cast<double>(plan.block_bytes())});
  }
  return out;
}

const std::vector<KvFormatBytes>& kv_format_bytes() {
  static const std::vector<KvFormatBytes> kFormats = {
      {"fp16", 2.0}, {"fp8 / int8", 1.0}, {"int4", 0.5}};
  return kFormats;
}

double max_context_tokens(double memory_bytes, const KvShape& shape, double bytes_per_element) {
  const double free = memory_bytes - shape.state_bytes();
  if (free < 0) return 0.0;
  const double per_token = shape.bytes_per_token(bytes_per_element);
  if (per_token <= 0) return std::numeric_limits<double>::infinity();
  if (shape.window > 0 && shape.bytes_at(shape.window, bytes_per_element) <= memory_bytes)
    return std::numeric_limits<double>::infinity();
  return free / per_token;
}

}  // namespace kvscope::ui

// Published KV shapes, read from the engine's synthetic presets so the two never disagree.
#include "app/core/memory_shapes.h"

#include "engine/model/synthetic.h"

namespace kvscope::ui {

double KvShape::bytes_per_token(double bytes_per_element) const {
  if (mla_latent > 0) return static_cast<double>(layers) * mla_latent * bytes_per_element;
  return 2.0 * layers * kv_heads * head_dim * bytes_per_element;
}

std::string KvShape::dims() const {
  if (mla_latent > 0)
    return std::to_string(layers) + " x " + std::to_string(mla_latent) + " (latent)";
  return "2 x " + std::to_string(layers) + " x " + std::to_string(kv_heads) + " x " +
         std::to_string(head_dim);
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
    k.kv_heads = c.n_kv_heads;
    k.head_dim = c.head_dim();
    if (c.mla_kv_lora_rank > 0) k.mla_latent = c.mla_kv_lora_rank + c.mla_rope_dim;
    shapes.push_back(k);
  }
  return shapes;
}

const std::vector<KvFormatBytes>& kv_format_bytes() {
  static const std::vector<KvFormatBytes> kFormats = {
      {"fp16", 2.0}, {"fp8 / int8", 1.0}, {"int4", 0.5}};
  return kFormats;
}

double max_context_tokens(double memory_bytes, double bytes_per_token) {
  return bytes_per_token > 0 ? memory_bytes / bytes_per_token : 0.0;
}

}  // namespace kvscope::ui

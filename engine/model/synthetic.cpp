// Synthetic model presets and random-weight generation.
#include "engine/model/synthetic.h"

#include <cmath>
#include <map>
#include <sstream>

#include "engine/common/error.h"

namespace kvscope {
namespace {

ModelConfig shape(int dim, int hidden, int layers, int heads, int kv_heads, int vocab, int seq_len,
                  int head_dim = 0) {
  ModelConfig c;
  c.dim = dim;
  c.hidden_dim = hidden;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.vocab_size = vocab;
  c.seq_len = seq_len;
  c.head_dim_override = head_dim;
  return c;
}

const std::map<std::string, ModelConfig>& presets() {
  static const std::map<std::string, ModelConfig> table = [] {
    std::map<std::string, ModelConfig> t;
    t["llama-3-8b"] = shape(4096, 14336, 32, 32, 8, 128256, 8192);
    t["llama-3-70b"] = shape(8192, 28672, 80, 64, 8, 128256, 8192);
    t["mistral-7b"] = shape(4096, 14336, 32, 32, 8, 32000, 32768);
    t["llama-2-7b"] = shape(4096, 11008, 32, 32, 32, 32000, 4096);
    // The published models have an output projection of their own (not tied to the embedding),
    // which puts the parameter counts at the published 8.0B / 70.6B / 7.2B / 6.7B.
    for (const char* name : {"llama-3-8b", "llama-3-70b", "mistral-7b", "llama-2-7b"})
      t[name].shared_classifier = false;
    t["stories15m"] = shape(288, 768, 6, 6, 6, 32000, 256);
    t["stories110m"] = shape(768, 2048, 12, 12, 12, 32000, 1024);
    // SmolLM2-135M's shape (its GGUF metadata): GQA 9 query over 3 KV heads, tied classifier.
    ModelConfig smol = shape(576, 1536, 30, 9, 3, 49152, 8192);
    smol.rope_theta = 100000.0f;
    smol.rms_eps = 1e-5f;
    t["smollm2-135m"] = smol;
    // DeepSeek-V3 attention dims: 128 heads of 128 (values), 61 layers, MLA latent 512 + RoPE 64.
    // The dense-FFN width stands in for the MoE experts; the shape serves KV studies only.
    ModelConfig ds = shape(7168, 18432, 61, 128, 128, 129280, 163840, 128);
    ds.rope_theta = 10000.0f;
    ds.mla_kv_lora_rank = 512;
    ds.mla_rope_dim = 64;
    t["deepseek-v3-mla-dims"] = ds;
    return t;
  }();
  return table;
}

int parse_int(const std::string& where, const std::string& text) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (...) {
    used = 0;
  }
  if (used != text.size() || used == 0 || v <= 0 || v > (1LL << 30)) {
    fail_expected(where, "a positive integer", "'" + text + "'");
  }
  return static_cast<int>(v);
}

}  // namespace

std::vector<std::string> synthetic_preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, cfg] : presets()) names.push_back(name);
  return names;
}

bool is_synthetic_model_arg(const std::string& model_arg) {
  return model_arg.rfind("synthetic:", 0) == 0;
}

namespace {

// Applies one "key=value" part of the spec to spec.config (or spec.seed); has_dim notes dim=.
void apply_key_value(const std::string& where, const std::string& part, SyntheticSpec& spec,
                     bool& has_dim) {
  auto eq = part.find('=');
  if (eq == std::string::npos) fail_expected(where, "key=value", "'" + part + "'");
  std::string key = part.substr(0, eq);
  std::string value = part.substr(eq + 1);
  std::string key_where = where + ": " + key;
  ModelConfig& c = spec.config;
  if (key == "seed") {
    spec.seed = static_cast<std::uint64_t>(parse_int(key_where, value));
    return;
  }
  int v = parse_int(key_where, value);
  if (key == "dim") {
    c.dim = v;
    has_dim = true;
  } else if (key == "hidden")
    c.hidden_dim = v;
  else if (key == "layers")
    c.n_layers = v;
  else if (key == "heads")
    c.n_heads = v;
  else if (key == "kv_heads")
    c.n_kv_heads = v;
  else if (key == "head_dim")
    c.head_dim_override = v;
  else if (key == "vocab")
    c.vocab_size = v;
  else if (key == "seq_len")
    c.seq_len = v;
  else {
    fail_expected(where,
                  "keys dim, hidden, layers, heads, kv_heads, head_dim, vocab, seq_len, seed",
                  "'" + key + "'");
  }
}

// Fills the sizes the spec left out, then checks that heads, KV heads and head size fit together.
void fill_defaults_and_check(const std::string& where, ModelConfig& c) {
  if (c.n_heads == 0) c.n_heads = std::max(1, c.dim / 64);
  if (c.n_kv_heads == 0) c.n_kv_heads = c.n_heads;
  if (c.hidden_dim == 0) c.hidden_dim = 4 * c.dim;
  if (c.n_layers == 0) c.n_layers = 1;
  if (c.vocab_size == 0) c.vocab_size = 512;
  if (c.seq_len == 0) c.seq_len = 2048;
  if (c.head_dim_override == 0 && c.dim % c.n_heads != 0) {
    fail_expected(where + ": dim", "a multiple of heads (" + std::to_string(c.n_heads) + ")",
                  std::to_string(c.dim));
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    fail_expected(where + ": kv_heads", "a divisor of heads (" + std::to_string(c.n_heads) + ")",
                  std::to_string(c.n_kv_heads));
  }
  if (c.head_dim() % 2 != 0) {
    fail_expected(where, "an even head size for RoPE", std::to_string(c.head_dim()));
  }
}

}  // namespace

SyntheticSpec parse_synthetic_spec(const std::string& spec_text) {
  const std::string where = "synthetic:" + spec_text;
  SyntheticSpec spec;
  spec.name = "custom";
  std::vector<std::string> parts;
  std::stringstream ss(spec_text);
  for (std::string part; std::getline(ss, part, ',');) parts.push_back(part);
  if (parts.empty()) {
    fail_expected(where, "a preset name or dim=...,layers=... numbers", "nothing");
  }
  std::size_t first_kv = 0;
  if (parts[0].find('=') == std::string::npos) {
    auto it = presets().find(parts[0]);
    if (it == presets().end()) {
      std::string names;
      for (const auto& n : synthetic_preset_names()) names += (names.empty() ? "" : ", ") + n;
      fail_expected(where, "one of the presets " + names, "'" + parts[0] + "'");
    }
    spec.name = parts[0];
    spec.config = it->second;
    first_kv = 1;
  }
  bool has_dim = spec.name != "custom";
  for (std::size_t i = first_kv; i < parts.size(); ++i)
    apply_key_value(where, parts[i], spec, has_dim);
  if (!has_dim) fail_expected(where, "dim=N (or a preset name)", "no dim");
  fill_defaults_and_check(where, spec.config);
  // A preset with overrides is not the preset: its name says what was changed.
  if (spec.name != "custom" && parts.size() > first_kv) spec.name = spec_text;
  return spec;
}

std::shared_ptr<const Model> make_synthetic_model(const SyntheticSpec& spec) {
  const ModelConfig& c = spec.config;
  const std::int64_t d = c.dim, L = c.n_layers, kv = c.kv_dim(), hd = c.hidden_dim, q = c.q_dim();
  std::int64_t total = c.num_params() + std::int64_t{c.seq_len} * c.head_dim();
  std::vector<float> data(static_cast<std::size_t>(total));
  std::uint64_t state = spec.seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  auto next_unit = [&state]() {  // splitmix64 -> uniform in [-1, 1)
    state += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<float>(static_cast<double>(z >> 40) / 8388608.0 - 1.0);
  };
  float* p = data.data();
  auto fill_matrix = [&](std::int64_t rows, std::int64_t cols) {
    const float a = std::sqrt(3.0f / static_cast<float>(cols));
    for (std::int64_t i = 0; i < rows * cols; ++i) *p++ = a * next_unit();
  };
  auto fill_ones = [&](std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) *p++ = 1.0f;
  };
  fill_matrix(c.vocab_size, d);  // token embedding
  fill_ones(L * d);              // rms_att
  fill_matrix(L * q, d);         // wq
  fill_matrix(L * kv, d);        // wk
  fill_matrix(L * kv, d);        // wv
  fill_matrix(L * d, q);         // wo
  fill_ones(L * d);              // rms_ffn
  fill_matrix(L * hd, d);        // w1
  fill_matrix(L * d, hd);        // w2
  fill_matrix(L * hd, d);        // w3
  fill_ones(d);                  // rms_final
  // RoPE tables are recomputed at run time; leave zeros.
  return Model::from_owned(c, std::move(data), "synthetic:" + spec.name + " (random weights)");
}

}  // namespace kvscope
